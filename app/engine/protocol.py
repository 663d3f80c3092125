"""The wire between the window's process and an engine process (app/engine/remote.py).

Every message is a frozen dataclass of plain data (requests, settings, events, summaries) that pickles across
the pipe; each side dispatches on the message's type with `match`.

    parent -> child   LoadModels(request)                   once, first: the models to load
                      StartRun(kind, prompt, settings, chat_template, requests)
                      LiveChange(settings)                   pushed when the caller's LiveSettings change
                      ControlChange(requests)                pushed on stop, pause, resume, step, slow motion
                      CloseEngine()
    child -> parent   LoadProgress(fraction, message)  ModelsLoaded(summary, token_texts)  LoadFailed(error)
                      RunStarted()  RunEvent(event) ...  RunDone()       or RunRaised(error) before or during a run

A load answers with progress, then `ModelsLoaded` or `LoadFailed`; a run with `RunStarted`, its events and
`RunDone`, or with `RunRaised` (a typed error: a bad prompt before it started, a failure during it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from app.engine.engine import ModelsSummary
from app.engine.load_request import LoadRequest
from app.engine.settings import ControlRequests, DecodeSettings

RunKind = Literal["decode", "race"]


# --- parent -> child --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadModels:
    request: LoadRequest


@dataclass(frozen=True)
class StartRun:
    kind: RunKind  # the decoder's generate, or a race
    prompt: str
    settings: DecodeSettings  # the caller's settings when the run starts
    chat_template: bool
    requests: ControlRequests  # the caller's control when the run starts


@dataclass(frozen=True)
class LiveChange:
    settings: DecodeSettings


@dataclass(frozen=True)
class ControlChange:
    requests: ControlRequests


@dataclass(frozen=True)
class CloseEngine:
    pass


ToChild = LoadModels | StartRun | LiveChange | ControlChange | CloseEngine


# --- child -> parent --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadProgress:
    fraction: float
    message: str


@dataclass(frozen=True)
class ModelsLoaded:
    summary: ModelsSummary
    token_texts: tuple[str, ...]  # every token id's text: the window spells tokens without a tokenizer


@dataclass(frozen=True)
class ErrorReport:
    """An exception as plain data: its class name (the parent raises the same typed error) and message."""

    error_type: str
    message: str

    @classmethod
    def of(cls, error: BaseException) -> ErrorReport:
        return cls(type(error).__name__, str(error) or type(error).__name__)


@dataclass(frozen=True)
class LoadFailed:
    error: ErrorReport


@dataclass(frozen=True)
class RunStarted:
    pass


@dataclass(frozen=True)
class RunEvent:
    event: Any  # an engine event (app/engine/events.py) or a race's (app/engine/race.py), unchanged


@dataclass(frozen=True)
class RunDone:
    pass


@dataclass(frozen=True)
class RunRaised:
    error: ErrorReport


ToParent = LoadProgress | ModelsLoaded | LoadFailed | RunStarted | RunEvent | RunDone | RunRaised
