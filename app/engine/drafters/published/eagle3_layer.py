"""EAGLE-3's decoder layer and head (the architecture alone; published/eagle3.py loads and exports checkpoints).

Notation and references as in published/eagle3.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from app.engine.drafters.heads.common import TargetShape
from app.engine.drafters.heads.eagle import EagleHead
from app.engine.drafters.heads.layers import MLP, KeysValues, RMSNorm
from app.engine.errors import DrafterCheckpointError

UNLIMITED = 1 << 30  # EAGLE-3 attends to every earlier row: a window no sequence reaches
PLAYGROUND_EPS, PLAYGROUND_ROPE_THETA = 1e-6, 10000.0  # of EAGLE-3 layers trained here (heads/layers.py's values)
# speculators flags whose layers this version does not build; a checkpoint that sets one is refused.
UNREAD_FLAGS = ("fc_norm", "norm_output")


@dataclass(frozen=True)
class Eagle3Shape:
    """The drafter's sizes and switches, read from either layout's config.json."""

    hidden_size: int
    target_hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    vocab_size: int  # the target vocabulary V it was trained with
    draft_vocab_size: int
    layers: int
    norm_before_residual: bool
    norm_before_fc: bool
    rope: dict  # the Llama config's rope fields (rope_theta, rope_scaling / rope_parameters, positions)


def layer_shape(layer: dict, top: dict, source: str) -> Eagle3Shape:
    """Sizes from a Llama-style `layer` config, with the EAGLE-3 fields of `top` (the same dict for SpecForge)."""
    try:
        hidden, heads = int(layer["hidden_size"]), int(layer["num_attention_heads"])
        vocab = int(layer["vocab_size"])
        shape = Eagle3Shape(
            hidden_size=hidden, target_hidden_size=int(top.get("target_hidden_size") or hidden), heads=heads,
            kv_heads=int(layer.get("num_key_value_heads") or heads),
            head_dim=int(layer.get("head_dim") or hidden // heads), intermediate=int(layer["intermediate_size"]),
            eps=float(layer.get("rms_norm_eps", 1e-6)), vocab_size=vocab,
            draft_vocab_size=int(top.get("draft_vocab_size") or vocab), layers=int(layer.get("num_hidden_layers", 1)),
            norm_before_residual=bool(top.get("norm_before_residual", False)),
            norm_before_fc=bool(top.get("norm_before_fc", False)),
            rope={key: layer[key] for key in ("rope_theta", "rope_scaling", "rope_parameters",
                                              "max_position_embeddings") if layer.get(key) is not None})
    except (KeyError, TypeError, ValueError) as exc:
        raise DrafterCheckpointError(f"the EAGLE-3 config of {source!r} lacks or mangles {exc}; download the "
                                     "checkpoint again.") from exc
    if shape.layers != 1:
        raise DrafterCheckpointError(f"{source!r} is an EAGLE-3 drafter of {shape.layers} decoder layers; this version "
                                     "reads one-layer drafters (the published EAGLE-3 checkpoints): choose one.")
    unread = [flag for flag in UNREAD_FLAGS if top.get(flag)]
    if unread or layer.get("attention_bias") or layer.get("mlp_bias"):
        raise DrafterCheckpointError(f"{source!r} sets {unread or 'attention or MLP biases'}, which this version "
                                     "does not read; choose a checkpoint without them.")
    return shape


def rotary_frequencies(shape: Eagle3Shape) -> tuple[torch.Tensor, float]:
    """(head_dim/2,) RoPE inverse frequencies and the attention scaling of the checkpoint's Llama rope settings
    (llama3, linear, yarn ...), computed as transformers computes them for the published layers."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=shape.hidden_size, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim, **shape.rope)
    rotary = LlamaRotaryEmbedding(config)
    return rotary.inv_freq.float(), float(rotary.attention_scaling)


class Eagle3Attention(nn.Module):
    """Llama attention whose q, k, v read `width` x H inputs (2 in EAGLE-3's layer, 1 in EAGLE-1's); grouped keys
    and values; explicit memory and mask."""

    def __init__(self, shape: Eagle3Shape, width: int = 2) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        self.q_proj = nn.Linear(width * shape.hidden_size, shape.heads * shape.head_dim, bias=False)
        self.k_proj = nn.Linear(width * shape.hidden_size, shape.kv_heads * shape.head_dim, bias=False)
        self.v_proj = nn.Linear(width * shape.hidden_size, shape.kv_heads * shape.head_dim, bias=False)
        self.o_proj = nn.Linear(shape.heads * shape.head_dim, shape.hidden_size, bias=False)
        inv_freq, self.scaling = rotary_frequencies(shape)
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(..., T, heads, d) rotated by `positions` (T,) (half-split layout, as Llama)."""
        angles = positions.to(x.device, torch.float32)[:, None] * self.inv_freq.float()  # (T, d/2)
        angles = torch.cat([angles, angles], dim=-1)  # (T, d)
        cos = (angles.cos() * self.scaling)[:, None, :].to(x.dtype)  # (T, 1, d)
        sin = (angles.sin() * self.scaling)[:, None, :].to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def keys_values(self, normed: torch.Tensor, positions: torch.Tensor) -> KeysValues:
        """Rows (..., T, 2H) at `positions` -> rotated keys and values (..., T, kv_heads, d)."""
        keys = self.k_proj(normed).unflatten(-1, (self.kv_heads, self.head_dim))
        values = self.v_proj(normed).unflatten(-1, (self.kv_heads, self.head_dim))
        return KeysValues(self.rotate(keys, positions), values, positions)

    def forward(self, normed: torch.Tensor, positions: torch.Tensor, memory: KeysValues,
                mask: torch.Tensor) -> torch.Tensor:
        """Rows (..., Tq, 2H) attend to `memory` under mask (Tq, Tk) -> (..., Tq, H)."""
        q = self.rotate(self.q_proj(normed).unflatten(-1, (self.heads, self.head_dim)), positions)
        group = self.heads // self.kv_heads
        k = memory.keys.repeat_interleave(group, dim=-2).transpose(-3, -2)  # (..., heads, Tk, d)
        v = memory.values.repeat_interleave(group, dim=-2).transpose(-3, -2)
        out = F.scaled_dot_product_attention(q.transpose(-3, -2), k, v, attn_mask=mask)  # (..., heads, Tq, d)
        return self.o_proj(out.transpose(-3, -2).flatten(-2))


class Eagle3Layer(nn.Module):
    """The EAGLE-3 decoder layer; rows u = [e ; g] (..., T, 2H). The methods are heads/layers.py Block's, so the
    playground's EAGLE drafter runs it unchanged."""

    def __init__(self, shape: Eagle3Shape) -> None:
        super().__init__()
        self.hidden_size, self.norm_before_residual = shape.hidden_size, shape.norm_before_residual
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.eps)
        self.hidden_norm = RMSNorm(shape.hidden_size, shape.eps)
        self.self_attn = Eagle3Attention(shape)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.eps)
        self.mlp = MLP(shape.hidden_size, shape.intermediate)  # SwiGLU, with the Llama names

    def attn_norm(self, u: torch.Tensor) -> torch.Tensor:
        """n = [input_layernorm(e) ; hidden_norm(g)] (..., T, 2H)."""
        embedded, hidden = u.split(self.hidden_size, dim=-1)
        return torch.cat([self.input_layernorm(embedded), self.hidden_norm(hidden)], dim=-1)

    def keys_values(self, u: torch.Tensor, positions: torch.Tensor, normed: torch.Tensor | None = None) -> KeysValues:
        return self.self_attn.keys_values(self.attn_norm(u) if normed is None else normed, positions)

    def forward(self, u: torch.Tensor, positions: torch.Tensor, memory: KeysValues, mask: torch.Tensor,
                normed: torch.Tensor | None = None) -> torch.Tensor:
        normed = self.attn_norm(u) if normed is None else normed
        residual = normed[..., self.hidden_size:] if self.norm_before_residual else u[..., self.hidden_size:]
        x = residual + self.self_attn(normed, positions, memory, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Eagle3Head(nn.Module):
    """fc, the layer (as `layers.0`), the final norm and the draft-vocabulary head; state-dict names are the
    speculators layout's. Offers EagleHead's interface (`fuse`, `rows`, `step`, `block`, `out_norm`, `window`)."""

    def __init__(self, shape: Eagle3Shape, own_embeddings: bool, own_head: bool = True) -> None:
        super().__init__()
        self.shape, self.window = shape, UNLIMITED
        self.input_norm = RMSNorm(3 * shape.target_hidden_size, shape.eps) if shape.norm_before_fc else None
        self.fc = nn.Linear(3 * shape.target_hidden_size, shape.hidden_size, bias=False)
        self.layers = nn.ModuleList([Eagle3Layer(shape)])
        self.norm = RMSNorm(shape.hidden_size, shape.eps)
        # A published drafter has its own head over V_d ids; one trained here borrows the target's (heads/common.py).
        self.lm_head = nn.Linear(shape.hidden_size, shape.draft_vocab_size, bias=False) if own_head else None
        self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size) if own_embeddings else None

    @classmethod
    def playground(cls, target: TargetShape, heads: int, intermediate: int, num_features: int = 3,
                   window: int = UNLIMITED) -> Eagle3Head:
        """An EAGLE-3 layer to train here (tools/train/heads.py, arch `layout: "eagle3"`): the target's
        embeddings and LM head, 64-wide heads, so that `export` writes it as a speculators checkpoint. `window`
        is accepted and ignored: EAGLE-3 attends to every row."""
        if num_features != 3:
            raise ValueError("an EAGLE-3 layer reads three target layers")
        shape = Eagle3Shape(hidden_size=target.hidden_size, target_hidden_size=target.hidden_size, heads=heads,
                            kv_heads=heads, head_dim=target.hidden_size // heads, intermediate=intermediate,
                            eps=PLAYGROUND_EPS, vocab_size=target.vocab_size, draft_vocab_size=target.vocab_size,
                            layers=1, norm_before_residual=False, norm_before_fc=False,
                            rope={"rope_theta": PLAYGROUND_ROPE_THETA})
        return cls(shape, own_embeddings=False, own_head=False)

    @property
    def block(self) -> Eagle3Layer:
        layer = self.layers[0]
        assert isinstance(layer, Eagle3Layer)  # for the type checker: nn.ModuleList yields plain modules
        return layer

    @property
    def out_norm(self) -> RMSNorm:
        return self.norm

    def fuse(self, taps: torch.Tensor) -> torch.Tensor:
        """g = fc(taps) (..., T, 3 H_t) -> (..., T, H)."""
        return self.fc(self.input_norm(taps) if self.input_norm is not None else taps)

    def rows(self, embedded: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        """u = [e ; g] (..., T, 2H); the layer splits it again (the residual is g alone)."""
        return torch.cat([embedded, feature], dim=-1)

    step = EagleHead.step  # the same cached step over the layer (heads/eagle.py)


def playground_taps(num_layers: int) -> tuple[int, ...]:
    """The target layers an EAGLE-3 layer trained here reads: EAGLE-3's default, which vLLM reads without ids."""
    return (2, num_layers // 2, num_layers - 3)
