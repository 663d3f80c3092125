"""Published Medusa heads (FasterDecoding/Medusa), and ours written in that format.

Notation as in heads/medusa.py: h_t the target's last hidden state after its final norm (HF `hidden_states[L]`),
head k = 0 .. K-1 predicts x_{t+k+2}. In FasterDecoding's MedusaModel (medusa/model/medusa_model.py) each head
is `medusa_num_layers` residual blocks and its own vocabulary projection:

    r^0 = h_t,   r^{l+1} = r^l + SiLU(W_{k,l} r^l + b_{k,l})     # ResBlock `{k}.{l}.linear`
    logits_k = U_k r^{L_m}                                        # `{k}.{L_m}.weight` (V, H), no bias

MedusaModel builds a head as `[ResBlock(H)] * medusa_num_layers`: one block repeated, so its layers share their
weights; the state dict still names each position, and every position must hold the same tensors. The weights
come as `medusa_lm_head.pt` (or `.safetensors`), or inside a full model under the `medusa_head.` prefix.

The playground's own Medusa head is this with one block and U_k the target's LM head, so `export` writes it
exactly and loading the export back drafts the same tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from app.engine.drafters.heads.common import HeadConfig, TargetParts, TargetShape, weight_of
from app.engine.drafters.heads.medusa import MedusaDrafter, MedusaHeads
from app.engine.drafters.published.checkpoint import (
    PublishedHead,
    check_loaded,
    place,
    read_weights,
    verifier_notice,
    weight_files,
)
from app.engine.drafters.published.formats import MEDUSA, CheckpointInfo
from app.engine.errors import DrafterCheckpointError

if TYPE_CHECKING:
    from app.engine.drafters.registry import Models

HEAD_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt")
FULL_MODEL_FILES = ("model.safetensors", "pytorch_model.bin")
PREFIX = "medusa_head."


class ResBlock(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


class PublishedMedusaHeads(nn.Module):
    """K heads of `layers` shared residual blocks and a (V, H) projection each; state-dict names as published."""

    def __init__(self, hidden: int, vocab: int, heads: int, layers: int) -> None:
        super().__init__()
        self.heads = nn.ModuleList()
        for _ in range(heads):
            block = ResBlock(hidden)
            self.heads.append(nn.Sequential(*([block] * layers), nn.Linear(hidden, vocab, bias=False)))

    @property
    def num_heads(self) -> int:
        return len(self.heads)

    def head(self, k: int) -> nn.Sequential:
        head = self.heads[k]
        assert isinstance(head, nn.Sequential)  # for the type checker: nn.ModuleList yields plain modules
        return head

    def forward(self, hidden: torch.Tensor, count: int | None = None) -> torch.Tensor:
        """(..., H) last hidden state -> (..., K', H): each head's input of its own projection."""
        return torch.stack([self.head(k)[:-1](hidden) for k in range(count or self.num_heads)], dim=-2)


class PerHeadParts(TargetParts):
    """Row k of the LM head's input goes through head k's own projection."""

    def __init__(self, embedding: nn.Module, module: PublishedMedusaHeads) -> None:
        super().__init__(embedding, module)
        self.module = module

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(K', H) -> (K', V) float32."""
        return torch.stack([self.module.head(k)[-1](row) for k, row in enumerate(hidden)]).float()


def head_weights(folder: Path, source: str) -> dict[str, torch.Tensor]:
    """`{k}.{l}...` tensors from medusa_lm_head.* or from a full model's `medusa_head.` entries."""
    if weight_files(folder, HEAD_FILES):
        return read_weights(folder, HEAD_FILES)
    weights = read_weights(folder, FULL_MODEL_FILES)
    heads = {key[len(PREFIX):]: value for key, value in weights.items() if key.startswith(PREFIX)}
    if not heads:
        raise DrafterCheckpointError(f"{source!r} holds no Medusa heads (no medusa_lm_head.pt / .safetensors and no "
                                     f"{PREFIX}* weights); download the checkpoint again.")
    return heads


def shared_blocks_agree(weights: dict[str, torch.Tensor], heads: int, layers: int, source: str) -> None:
    """MedusaModel repeats one block per head: a checkpoint whose positions differ was not written by it."""
    for k in range(heads):
        for name in ("linear.weight", "linear.bias"):
            first = weights.get(f"{k}.0.{name}")
            for layer in range(1, layers):
                other = weights.get(f"{k}.{layer}.{name}")
                if first is not None and other is not None and not torch.equal(first, other):
                    raise DrafterCheckpointError(f"{source!r}: head {k}'s residual blocks differ, but FasterDecoding's "
                                                 "Medusa shares one block per head; check the checkpoint's format.")


def load(folder: Path, config: dict, source: str, models: Models) -> PublishedHead:
    """A FasterDecoding Medusa checkpoint, checked against `models.target` and placed on its device."""
    target = TargetShape.of(models.target, models.num_layers)
    try:
        heads, layers = int(config["medusa_num_heads"]), int(config.get("medusa_num_layers", 1))
    except (KeyError, TypeError, ValueError) as exc:
        raise DrafterCheckpointError(f"the Medusa config of {source!r} lacks or mangles {exc}; download the "
                                     "checkpoint again.") from exc
    weights = head_weights(folder, source)
    projection = weights.get(f"0.{layers}.weight")
    if projection is not None and projection.dim() == 2:
        vocab, hidden = projection.shape
        fix = "load the target it was trained for, or heads trained for this target"
        if hidden != target.hidden_size:
            raise DrafterCheckpointError(f"{source!r}: Medusa heads of hidden size {hidden}; the loaded target's is "
                                         f"{target.hidden_size}: {fix}.")
        if vocab != target.vocab_size:
            raise DrafterCheckpointError(f"{source!r}: Medusa heads over a vocabulary of {vocab}; the loaded target "
                                         f"has {target.vocab_size}: {fix}.")
    shared_blocks_agree(weights, heads, layers, source)
    module = PublishedMedusaHeads(target.hidden_size, target.vocab_size, heads, layers)
    check_loaded(module, {f"heads.{key}": value for key, value in weights.items()}, source, MEDUSA)
    place(module, models)
    verifier = str(config.get("base_model_name_or_path") or "")
    info = CheckpointInfo(MEDUSA, "medusa", source, verifier, target.vocab_size, (target.num_layers,))
    head_config = HeadConfig("medusa", target, (target.num_layers,), {}, target_name=verifier)
    return PublishedHead("medusa", head_config, module, folder, info,
                         PerHeadParts(models.target.get_input_embeddings(), module), MedusaDrafter,
                         verifier_notice(info, models.target_name))


# ---- writing ours ---------------------------------------------------------------------------------


def export(heads: MedusaHeads, lm_head: nn.Module, target_name: str, out: Path,
           dtype: torch.dtype | None = None) -> Path:
    """Write the playground's Medusa heads as FasterDecoding's `medusa_lm_head.pt` + config.json in `out`: one
    residual block per head and the target's LM head as every head's projection, in `dtype` (default: the LM
    head's own, so that the projection is the target's to the bit)."""
    out.mkdir(parents=True, exist_ok=True)
    dtype = dtype or weight_of(lm_head).dtype
    projection = weight_of(lm_head).detach().to("cpu", dtype).contiguous()  # (V, H)
    state = {}
    for k, head in enumerate(heads.heads):
        assert isinstance(head, nn.Linear)  # for the type checker: nn.ModuleList yields plain modules
        state[f"{k}.0.linear.weight"] = head.weight.detach().to("cpu", dtype).contiguous()
        state[f"{k}.0.linear.bias"] = weight_of_bias(head).to("cpu", dtype).contiguous()
        state[f"{k}.1.weight"] = projection  # one storage in the file, K projections when read
    torch.save(state, out / "medusa_lm_head.pt")
    config = {"medusa_num_heads": heads.num_heads, "medusa_num_layers": 1, "base_model_name_or_path": target_name}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def weight_of_bias(layer: nn.Linear) -> torch.Tensor:
    assert layer.bias is not None, "the playground's Medusa heads have biases"
    return layer.bias.detach()
