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

from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import TreeDraft


@dataclass(frozen=True)
class Draft:
    tokens: torch.Tensor  # (k,) long, 1 <= k <= requested
    q: torch.Tensor | None  # (k, V) warped drafter probabilities; None = deterministic (one-hot q)

    def __len__(self) -> int:
        return self.tokens.numel()


class Drafter(Protocol):
    name: str
    # Target hidden states this drafter reads (indices into HF `hidden_states`); empty for most drafters,
    # so the target computes and keeps features only while a drafter that needs them is in the chain.
    feature_layers: tuple[int, ...]

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler,
                features: list[torch.Tensor] | None = None) -> Draft | None:
        """Up to k tokens following `ids` (N,), or None when there is nothing to propose.

        `features[j]` is (N-1, H): the target's hidden states of `feature_layers[j]` at positions 0..N-2
        (the target has not seen the last committed token yet).
        """

    def reset(self) -> None:
        """Forget all state (a new request begins)."""


class TreeDrafter(Drafter, Protocol):
    """A drafter that can branch (docs/ALGORITHMS.md §9.2)."""

    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int, sampler: TokenSampler,
                     features: list[torch.Tensor] | None = None) -> TreeDraft | None:
        """At most `budget` nodes, none deeper than `depth`, following `ids` (N,); None when nothing to propose.

        Under a greedy sampler the children are chosen (distinct tokens, best first); under a sampling one,
        drafters with a q draw each node's children i.i.d. from q and never prune them after the draw, which
        SpecInfer's rule needs to stay lossless.
        """


def can_branch(drafter: Drafter) -> bool:
    return callable(getattr(drafter, "propose_tree", None))
