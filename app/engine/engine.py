"""The one contract between the window (or any other front end) and an engine, wherever it runs.

    engine = LocalEngine.load(dict(target=None, draft=None))   # or EngineProcess(request): the same contract
    engine.summary                                             # ModelsSummary: plain data about the models
    for event in engine.generate(prompt, live, control): ...  # StartEvent, PassEvent ..., EndEvent
    for event in engine.race(prompt, live, control): ...      # RaceEvent ..., RaceResult
    engine.token_text(token_id)                               # the target tokenizer's text of one id
    engine.close()

`LocalEngine` holds the models in this process; `EngineProcess` (app/engine/remote.py) in a child
process. Both raise the same typed errors (SettingsError, ContextTooLongError, ModelLoadError ...).
This module imports neither torch nor Qt: the window's process uses the contract without the models.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from app.engine.events import Event
from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings, RepetitionSettings

if TYPE_CHECKING:
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import LoadedModels
    from app.engine.race import RaceEvent, RaceResult

Progress = Callable[[float, str], None]  # (fraction 0..1, message), called between loading steps
Cancelled = Callable[[], bool]  # polled while loading: True abandons the load


@dataclass(frozen=True)
class ModelsSummary:
    """What a front end shows and offers about the loaded models (plain data, no tensors)."""

    target_name: str
    draft_name: str | None
    device: str
    dtype: str
    available_drafters: tuple[str, ...]
    num_layers: int
    default_exit_layer: int
    context_length: int
    has_chat_template: bool = False  # the target tokenizer can wrap a prompt as a chat turn
    execution: str = "dynamic cache"  # how the models run: cache kind, ", compiled" (app/engine/runtime/execution.py)
    suggested_repetition: RepetitionSettings = RepetitionSettings()  # the family's starting repetition controls

    @classmethod
    def of(cls, models: LoadedModels) -> ModelsSummary:
        return cls(target_name=models.target_name, draft_name=models.draft_name, device=str(models.device),
                   dtype=str(models.dtype).removeprefix("torch."), available_drafters=tuple(models.available_drafters),
                   num_layers=int(models.num_layers), default_exit_layer=int(models.default_exit_layer),
                   context_length=int(models.context_length),
                   has_chat_template=bool(getattr(models.tokenizer, "chat_template", None)),
                   execution=models.execution.label, suggested_repetition=models.suggested_repetition)


class Engine(Protocol):
    """Loaded models that generate and race. One run at a time; typed errors before the first event."""

    summary: ModelsSummary

    @property
    def alive(self) -> bool:
        """False once the engine can run nothing more (its process died): load the models again."""
        ...

    def generate(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
                 chat_template: bool = False) -> Iterator[Event]:
        """As `SpeculativeDecoder.generate`: settings read at every pass, control checked between passes."""
        ...

    def race(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
             chat_template: bool = False) -> Iterator[RaceEvent | RaceResult]:
        """As `Race.generate`: plain decoding against the speculative set-up, interleaved."""
        ...

    def token_text(self, token_id: int) -> str:
        """The target tokenizer's text of one token id ("" for an id it does not have)."""
        ...

    def close(self) -> None:
        """Release the models; safe to call twice."""
        ...


EngineFactory = Callable[[dict, Progress, Cancelled], Engine]  # (load_models' arguments, progress, cancelled)


class LocalEngine:
    """The engine in this process: loaded models, their decoder, and races on the same models."""

    def __init__(self, models: LoadedModels, decoder: SpeculativeDecoder | None = None) -> None:
        from app.engine.decoding.decoder import SpeculativeDecoder  # here: the contract imports without torch

        self.models = models
        self.decoder = decoder if decoder is not None else SpeculativeDecoder(models)
        self.summary = ModelsSummary.of(models)

    @classmethod
    def load(cls, request: dict, progress: Progress | None = None, cancelled: Cancelled = lambda: False) -> LocalEngine:
        """Load `request` (load_models' arguments). A model's weights cannot be interrupted half read, nor can one
        compile, so a cancel takes effect where `progress` is next called (each model read, each shape compiled
        when compiling): let `progress` raise to abandon the load."""
        from app.engine.loading import load_models

        return cls(load_models(**request, progress=progress))

    @property
    def alive(self) -> bool:
        return True  # it lives as long as this process

    def generate(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
                 chat_template: bool = False) -> Iterator[Event]:
        return self.decoder.generate(prompt, live, control, chat_template=chat_template)

    def race(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
             chat_template: bool = False) -> Iterator[RaceEvent | RaceResult]:
        from app.engine.race import Race

        return Race(self.models).generate(prompt, live, control, chat_template=chat_template)

    def token_text(self, token_id: int) -> str:
        text = self.models.tokenizer.decode([token_id])
        assert isinstance(text, str), "one sequence of ids decodes to one string (a list is for a batch)"
        return text

    def close(self) -> None:
        """Nothing to end: the models are freed with the last reference to them."""
