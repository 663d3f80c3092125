"""Published EAGLE-1 / EAGLE-2 drafters (SafeAILab/EAGLE eagle/model/cnets1.py; EAGLE-2 drafts dynamic trees with
the same weights).

Notation as in eagle3.py; f_i = h^L_i, the target's last hidden state after its final norm (HF
`hidden_states[L]`), which EAGLE-1 learns to predict:

    u_i   = fc [ emb(x_{i+1}) ; f_i ]                 # (2H -> H), with bias
    o'_i  = u_i + Attn(u)_i                           # layer 0 has no input_layernorm
    o_i   = o'_i + MLP(post_attention_layernorm(o'_i))
    z_i   = lm_head_target(o_i)                       # o is a predicted feature: no further norm

A drafting step feeds o as the next row's f. Weights: `fc.{weight,bias}`, `layers.0.{self_attn.*,
post_attention_layernorm, mlp.*}`, optionally `embed_tokens`; no `hidden_norm`, `midlayer`, `norm` or `lm_head`,
which is how they are told from EAGLE-3's. Runs in heads/eagle.py's EagleDrafter like the other EAGLE layers.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from app.engine.drafters.heads.common import HeadConfig, TargetParts, TargetShape
from app.engine.drafters.heads.eagle import EagleDrafter, EagleHead
from app.engine.drafters.heads.layers import MLP, KeysValues, RMSNorm
from app.engine.drafters.published.checkpoint import PublishedHead, check_loaded, place, read_weights, verifier_notice
from app.engine.drafters.published.eagle3 import WEIGHT_NAMES
from app.engine.drafters.published.eagle3_layer import UNLIMITED, Eagle3Attention, Eagle3Shape, layer_shape
from app.engine.drafters.published.formats import EAGLE1, CheckpointInfo
from app.engine.errors import DrafterCheckpointError

if TYPE_CHECKING:
    from app.engine.drafters.registry import Models


def is_eagle1(weights: dict[str, torch.Tensor]) -> bool:
    """EAGLE-1/2's keys: a 2H -> H `fc` with a bias and a layer 0 without EAGLE-3's `hidden_norm`."""
    fc = weights.get("fc.weight")
    return (fc is not None and fc.dim() == 2 and fc.shape[1] == 2 * fc.shape[0] and "fc.bias" in weights
            and "layers.0.hidden_norm.weight" not in weights and "midlayer.hidden_norm.weight" not in weights)


class Eagle1Layer(nn.Module):
    """Layer 0 of cnets1.py (no input_layernorm); Block's methods, so EagleDrafter runs it."""

    def __init__(self, shape: Eagle3Shape) -> None:
        super().__init__()
        self.self_attn = Eagle3Attention(shape, width=1)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.eps)
        self.mlp = MLP(shape.hidden_size, shape.intermediate)

    def attn_norm(self, u: torch.Tensor) -> torch.Tensor:
        return u  # layer 0 reads fc's output as it is

    def keys_values(self, u: torch.Tensor, positions: torch.Tensor, normed: torch.Tensor | None = None) -> KeysValues:
        return self.self_attn.keys_values(u, positions)

    def forward(self, u: torch.Tensor, positions: torch.Tensor, memory: KeysValues, mask: torch.Tensor,
                normed: torch.Tensor | None = None) -> torch.Tensor:
        x = u + self.self_attn(u, positions, memory, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Eagle1Head(nn.Module):
    """fc and layer 0 (state-dict names as published); EagleHead's interface with identity `fuse` and `out_norm`."""

    def __init__(self, shape: Eagle3Shape, own_embeddings: bool) -> None:
        super().__init__()
        self.window = UNLIMITED
        self.fc = nn.Linear(2 * shape.hidden_size, shape.hidden_size, bias=True)
        self.layers = nn.ModuleList([Eagle1Layer(shape)])
        self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size) if own_embeddings else None
        self.out_norm = nn.Identity()  # the output is a predicted (already normed) feature

    @property
    def block(self) -> Eagle1Layer:
        layer = self.layers[0]
        assert isinstance(layer, Eagle1Layer)  # for the type checker: nn.ModuleList yields plain modules
        return layer

    def fuse(self, feature: torch.Tensor) -> torch.Tensor:
        return feature  # one feature, the final normed state

    def rows(self, embedded: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        """u = fc [e ; f] (..., T, H)."""
        return self.fc(torch.cat([embedded, feature], dim=-1))

    step = EagleHead.step  # the same cached step over the layer (heads/eagle.py)


def load(folder: Path, config: dict, source: str, models: Models,
         weights: dict[str, torch.Tensor] | None = None) -> PublishedHead:
    """An EAGLE-1/2 checkpoint, checked against `models.target` and placed on its device."""
    target = TargetShape.of(models.target, models.num_layers)
    shape = layer_shape(config, config, source)
    weights = weights if weights is not None else read_weights(folder, WEIGHT_NAMES)
    weights = {k: v for k, v in weights.items() if not k.endswith("rotary_emb.inv_freq")}  # older files keep it
    fix = "load the target it was trained for, or a drafter trained for this target"
    if shape.hidden_size != target.hidden_size:
        raise DrafterCheckpointError(f"{source!r} is an EAGLE-1/2 drafter of hidden size {shape.hidden_size}; the "
                                     f"loaded target's is {target.hidden_size}: {fix}.")
    if shape.vocab_size != target.vocab_size:
        raise DrafterCheckpointError(f"{source!r} was trained for a vocabulary of {shape.vocab_size} tokens; the loaded"
                                     f" target has {target.vocab_size}: {fix}.")
    module = Eagle1Head(shape, own_embeddings="embed_tokens.weight" in weights)
    check_loaded(module, weights, source, EAGLE1)
    place(module, models)
    embedding = module.embed_tokens if module.embed_tokens is not None else models.target.get_input_embeddings()
    verifier = str(config.get("base_model_name_or_path") or "")
    info = CheckpointInfo(EAGLE1, "eagle", source, verifier, target.vocab_size, (target.num_layers,))
    head_config = HeadConfig("eagle", target, (target.num_layers,), {}, target_name=verifier)
    parts = TargetParts(embedding, models.target.get_output_embeddings())
    return PublishedHead("eagle", head_config, module, folder, info, parts, EagleDrafter,
                         verifier_notice(info, models.target_name))
