"""What every learned drafter shares: its configuration, the target's parts it borrows.

Notation (docs/ALGORITHMS.md §1; the learned drafters in §8.6-§8.9): the committed sequence is x_0 .. x_{N-1}; the
target's hidden state of layer l at position t is h^l_t, known for
t <= N-2 (the target has not seen x_{N-1} yet); `H` is the hidden size, `V`
the vocabulary size, `K` the draft length. A learned drafter maps those
features (and tokens) to logits through the *target's own* LM head (and reads
token embeddings from the target's embedding table), so no head stores a
vocabulary-sized matrix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, TypeGuard

import torch
from torch import nn

from app.engine.core.transfer import to_device
from app.engine.drafters.base import Draft

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FORMAT_VERSION = 1


@dataclass(frozen=True)
class TargetShape:
    """The part of a target a head depends on; heads load only onto a target of the same shape."""

    hidden_size: int
    vocab_size: int
    num_layers: int

    @classmethod
    def of(cls, target: PreTrainedModel, num_layers: int) -> TargetShape:
        return cls(int(weight_of(target.get_input_embeddings()).shape[1]),
                   int(target.get_output_embeddings().weight.shape[0]), int(num_layers))


@dataclass(frozen=True)
class HeadConfig:
    """Contents of a head folder's config.json (see FORMAT.md)."""

    family: str
    target: TargetShape
    feature_layers: tuple[int, ...]  # indices into HF hidden_states (0 = embeddings, num_layers = final, normed)
    arch: dict  # family hyper-parameters, passed to the module's constructor
    training: dict = field(default_factory=dict)  # informative only: steps, seconds, data, seed, losses
    target_name: str = ""
    format_version: int = FORMAT_VERSION

    def to_json(self) -> dict:
        payload = asdict(self)
        payload["feature_layers"] = list(self.feature_layers)
        return payload

    @classmethod
    def from_json(cls, payload: dict) -> HeadConfig:
        return cls(family=payload["family"], target=TargetShape(**payload["target"]),
                   feature_layers=tuple(int(i) for i in payload["feature_layers"]), arch=dict(payload["arch"]),
                   training=dict(payload.get("training", {})), target_name=payload.get("target_name", ""),
                   format_version=int(payload.get("format_version", FORMAT_VERSION)))


def weight_of(layer: nn.Module) -> torch.Tensor:
    """A layer's `weight` (torch types a module's attributes as tensor-or-module; a layer's weight is a tensor)."""
    weight = layer.weight
    assert isinstance(weight, torch.Tensor), f"{type(layer).__name__}.weight is not a tensor"
    return weight


def fused_layers(num_layers: int) -> tuple[int, ...]:
    """Low, middle and high feature layers (EAGLE-3 style); the high one is the final, normed state."""
    return tuple(sorted({1, max(1, num_layers // 2), num_layers}))


def fused_layout(target: TargetShape) -> tuple[tuple[int, ...], dict]:
    """Feature layers and default hyper-parameters of a drafter over fused features (EAGLE, DFlash):
    low, middle and high layers; 64-wide attention heads."""
    layers = fused_layers(target.num_layers)
    return layers, {"heads": max(1, target.hidden_size // 64), "num_features": len(layers)}


class TargetParts:
    """The target's embedding table and LM head, borrowed by a head (never copied or trained)."""

    def __init__(self, embedding: nn.Module, lm_head: nn.Module) -> None:
        self.embedding = embedding
        self.lm_head = lm_head

    @classmethod
    def of(cls, target: PreTrainedModel) -> TargetParts:
        return cls(target.get_input_embeddings(), target.get_output_embeddings())

    @property
    def device(self) -> torch.device:
        return weight_of(self.embedding).device

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """(...,) token ids -> (..., H)."""
        return self.embedding(to_device(ids, self.device))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., V) float32."""
        return self.lm_head(hidden).float()


class HeadDrafter:
    """What every learned drafter is made of: its name, the trained module, the target's parts, the layers it reads.

    Subclasses implement `propose`; a stateful one (EAGLE) also overrides `reset`, which runs once here.
    """

    def __init__(self, name: str, module: nn.Module, parts: TargetParts, config: HeadConfig) -> None:
        self.name = name
        self.module = module
        self.parts = parts
        self.feature_layers = config.feature_layers
        self.reset()

    def reset(self) -> None:
        pass  # stateless: everything comes from the target's features


def as_draft(tokens: list[torch.Tensor] | torch.Tensor, rows: list[torch.Tensor] | torch.Tensor) -> Draft:
    tokens = torch.stack(tokens) if isinstance(tokens, list) else tokens  # (K,)
    rows = torch.stack(rows) if isinstance(rows, list) else rows  # (K, V)
    return Draft(tokens.reshape(-1).cpu(), rows.reshape(tokens.numel(), -1))


def has_features(features: list[torch.Tensor] | None) -> TypeGuard[list[torch.Tensor]]:
    return features is not None and len(features) > 0 and features[0].shape[0] > 0


def fuse_input(features: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate the chosen layers: each (..., T, H) -> (..., T, n*H)."""
    return torch.cat(list(features), dim=-1)
