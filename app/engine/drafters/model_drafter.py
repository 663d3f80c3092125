"""Drafting with a causal LM: a smaller draft model, or the target's first layers (layer skip).

The drafter feeds the committed tokens it has not seen (catching up when every
draft was accepted, or after being switched on mid-run), then samples K tokens
one forward at a time from q, the drafter distribution warped exactly like
the target's. As a tree drafter it scores each round of frontier nodes in one
forward with a tree mask (`tree_growth.py`) and drops those rows afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import TreeDraft
from app.engine.drafters.base import Draft
from app.engine.drafters.tree_growth import grow_tree
from app.engine.runtime.cached_model import CachedModel
from app.engine.runtime.execution import Execution


def fit_vocabulary(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Drop padded vocabulary rows (or pad with -inf) so logits (..., V') become (..., V)."""
    extra = logits.shape[-1] - vocab_size
    if extra > 0:
        return logits[..., :vocab_size]
    if extra < 0:
        return F.pad(logits, (0, -extra), value=float("-inf"))
    return logits


class ModelDrafter:
    def __init__(self, name: str, model, vocab_size: int, layers: Sequence[int] | None = None,
                 execution: Execution | None = None) -> None:
        self.name = name
        self.vocab_size = vocab_size
        self.cached = CachedModel(model, layers=layers, execution=execution, role=f"{name} drafter")

    feature_layers: tuple[int, ...] = ()

    def reset(self) -> None:
        self.cached.reset()

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler, features=None) -> Draft:
        logits = self.cached.advance_to(ids, last=1)[-1]  # (V',)
        tokens: list[torch.Tensor] = []  # the drafts so far: each next row continues them
        rows = []
        for step in range(k):
            token, q = sampler.draw(fit_vocabulary(logits, self.vocab_size), tokens)  # (), (V,)
            tokens.append(token)
            rows.append(q)
            if step + 1 < k:
                logits = self.cached.extend(token.view(1))[-1]
        return Draft(torch.stack(tokens).cpu(), torch.stack(rows))  # (k,), (k, V)

    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int, sampler: TokenSampler,
                     features=None) -> TreeDraft:
        if self.cached.tree_problem() is not None:  # this model takes no tree masks: its chain is a one-branch tree
            chain = self.propose(ids, min(depth, budget), sampler)
            return TreeDraft.chain(chain.tokens, chain.q)
        root_logits = fit_vocabulary(self.cached.advance_to(ids, last=1)[-1], self.vocab_size)  # (V,)

        def expand(tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
            return fit_vocabulary(self.cached.extend_tree(tokens, parents), self.vocab_size)  # (F, V)

        try:
            return grow_tree(root_logits, expand, depth, budget, sampler)
        finally:
            self.cached.drop_tail()
