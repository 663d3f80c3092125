"""Small transformer parts shared by the learned drafters (MTP, EAGLE, DFlash).

Notation: rows are token positions, `H` the hidden size, `W` an attention
window. Attention takes explicit keys and values and a boolean mask, so a
caller can attend over a KV cache, over injected context rows (DFlash) or over
the rows of earlier unrolled steps (EAGLE training) with one block.

The mask rule used everywhere is `window_mask`: a query at position i sees a key
at position j iff j <= i and i - j < W. Training and drafting build it the same
way, so a drafter computed over a short window reproduces training exactly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (x.float() * scale).to(x.dtype) * self.weight


@functools.lru_cache(maxsize=16)
def inverse_frequencies(d: int, theta: float, device: torch.device) -> torch.Tensor:
    """(d/2,) float32 RoPE frequencies, made once per size and device (outside inference mode, so that training
    can use them too)."""
    with torch.inference_mode(False), torch.no_grad():
        return 1.0 / theta ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d)


def rotary(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Rotate (..., T, heads, d) by the angles of `positions` (T,) (RoPE, half-split layout)."""
    d = x.shape[-1]
    inv_freq = inverse_frequencies(d, theta, x.device)  # (d/2,)
    angles = positions.to(x.device, torch.float32)[:, None] * inv_freq  # (T, d/2)
    cos, sin = angles.cos()[:, None, :].to(x.dtype), angles.sin()[:, None, :].to(x.dtype)  # (T, 1, d/2)
    first, second = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


def window_mask(query_positions: torch.Tensor, key_positions: torch.Tensor, window: int) -> torch.Tensor:
    """(Tq, Tk) bool: key j is visible to query i iff pos_j <= pos_i and pos_i - pos_j < window."""
    distance = query_positions[:, None] - key_positions[None, :]  # (Tq, Tk)
    return (distance >= 0) & (distance < window)


@dataclass
class KeysValues:
    """Rotated keys and values of some rows: each (..., T, heads, d), plus their positions (T,)."""

    keys: torch.Tensor
    values: torch.Tensor
    positions: torch.Tensor

    def __len__(self) -> int:
        return self.positions.numel()

    def cat(self, other: KeysValues) -> KeysValues:
        return KeysValues(torch.cat([self.keys, other.keys], -3), torch.cat([self.values, other.values], -3),
                          torch.cat([self.positions, other.positions]))

    def head(self, length: int) -> KeysValues:
        return KeysValues(self.keys[..., :length, :, :], self.values[..., :length, :, :], self.positions[:length])

    def tail(self, length: int) -> KeysValues:
        start = max(0, len(self) - length)
        return KeysValues(self.keys[..., start:, :, :], self.values[..., start:, :, :], self.positions[start:])


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, self.head_dim))  # (..., T, heads, d)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor) -> KeysValues:
        """Keys and values of rows x (..., T, H) at `positions` (T,)."""
        return KeysValues(rotary(self._split(self.k_proj(x)), positions), self._split(self.v_proj(x)), positions)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, memory: KeysValues,
                mask: torch.Tensor) -> torch.Tensor:
        """Rows x (..., Tq, H) at `positions` attend to `memory` under mask (Tq, Tk) -> (..., Tq, H)."""
        q = rotary(self._split(self.q_proj(x)), positions).transpose(-3, -2)  # (..., heads, Tq, d)
        k, v = memory.keys.transpose(-3, -2), memory.values.transpose(-3, -2)  # (..., heads, Tk, d)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (..., heads, Tq, d)
        return self.o_proj(out.transpose(-3, -2).flatten(-2))


class MLP(nn.Module):
    """SwiGLU feed-forward, as in Llama."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm x), then + mlp(norm x)."""

    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.mlp_norm = RMSNorm(hidden)
        self.mlp = MLP(hidden, intermediate)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor, normed: torch.Tensor | None = None) -> KeysValues:
        """`normed`: attn_norm(x), where the caller has it already."""
        return self.attn.keys_values(self.attn_norm(x) if normed is None else normed, positions)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, memory: KeysValues, mask: torch.Tensor,
                normed: torch.Tensor | None = None) -> torch.Tensor:
        """`memory` must already hold the keys of x's own rows where they attend to themselves; `normed` as in
        `keys_values` (a drafting step normalises its row once for both)."""
        x = x + self.attn(self.attn_norm(x) if normed is None else normed, positions, memory, mask)
        return x + self.mlp(self.mlp_norm(x))

    def causal(self, x: torch.Tensor, positions: torch.Tensor, window: int) -> torch.Tensor:
        """Rows x (..., T, H) attending to each other under the window mask."""
        return self(x, positions, self.keys_values(x, positions), window_mask(positions, positions, window))
