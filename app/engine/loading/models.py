"""The loaded models as one frozen value: what the decoder, the drafters and the front ends read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from app.engine.drafters.registry import available_drafters
from app.engine.runtime.cached_model import find_layer_list
from app.engine.runtime.execution import Execution
from app.engine.settings import RepetitionSettings

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    # What AutoModelForCausalLM.from_pretrained is declared to return: a PreTrainedModel that can also `generate`.
    from transformers.models.auto.modeling_auto import _BaseModelWithGenerate as CausalLM

    from app.engine.drafters.heads.format import HeadSpec


@dataclass(frozen=True, eq=False)
class LoadedModels:
    """What one load made ready: the target, its tokenizer, the optional draft model and learned heads, and how
    they run. Frozen: a new load makes a new one."""

    target: CausalLM
    tokenizer: PreTrainedTokenizerBase
    target_name: str
    device: torch.device
    dtype: torch.dtype
    draft: CausalLM | None = None
    draft_name: str | None = None
    default_exit_layer: int = 1
    heads: Mapping[str, HeadSpec] = field(default_factory=dict)  # learned drafters, by drafter name
    execution: Execution = field(default_factory=Execution)  # cache kind and compilation (runtime/execution.py)
    # The repetition controls the models' family suggests (a front end's starting values; the engine applies only
    # what the settings say).
    suggested_repetition: RepetitionSettings = field(default_factory=RepetitionSettings)

    @property
    def num_layers(self) -> int:
        found = find_layer_list(self.target)
        return len(found[2]) if found else 0

    @property
    def context_length(self) -> int:
        config = self.target.config
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return 1 << 20

    @property
    def vocab_size(self) -> int:
        return self.target.get_output_embeddings().weight.shape[0]

    @property
    def available_drafters(self) -> tuple[str, ...]:
        return available_drafters(self)

    @property
    def eos_ids(self) -> frozenset[int]:
        ids = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.target.generation_config, "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(source)
        return frozenset(ids)
