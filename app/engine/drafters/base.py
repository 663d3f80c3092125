"""The drafter protocol.

A drafter proposes up to `k` tokens that follow the committed sequence `ids`.
It owns its state (a KV cache, n-gram tables) and keeps it consistent by
itself: every `propose` receives the whole committed sequence, so a drafter
switched on mid-generation, or skipped for a few passes by a fallback chain,
catches up on its own, and rollbacks need no callback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from app.engine.sampling import TokenSampler


@dataclass(frozen=True)
class Draft:
    tokens: torch.Tensor  # (k,) long, 1 <= k <= requested
    q: torch.Tensor | None  # (k, V) warped drafter probabilities; None = deterministic (one-hot q)

    def __len__(self) -> int:
        return self.tokens.numel()


class Drafter(Protocol):
    name: str

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler) -> Draft | None:
        """Up to k tokens following `ids` (N,), or None when there is nothing to propose."""

    def reset(self) -> None:
        """Forget all state (a new request begins)."""
