"""Medusa heads: K residual blocks on the target's last hidden state, drafting all K tokens in one step.

Notation as in `common`: with t = N-2 the last position the target has seen,
head k (k = 0 .. K-1) predicts x_{t+k+2} = x_{N+k} from h_t alone:

    logits_k = lm_head(h_t + SiLU(W_k h_t + b_k))        # (V,)

The vocabulary projection is the target's own LM head (shared at load time;
the original Medusa gives every head its own copy, initialised from it). That
keeps each head at H*(H+1) parameters instead of H*(H+V). W_k starts at zero,
so an untrained head repeats the target's next-token guess. The target's
logits at t already chose x_{N-1}, so head 0 drafts the token after it.

Chain drafting takes each head's top-1 (greedy) or one sample from each
head's warped q (sampling); heads do not see each other's drafts, which keeps
the rejection rule exact because each token is drawn from the q reported.
A tree takes several of each head's likeliest tokens per level (Medusa's tree
attention), pruned to the node budget by path probability.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import TreeDraft
from app.engine.drafters.base import Draft
from app.engine.drafters.heads.common import HeadDrafter, TargetShape, as_draft, has_features
from app.engine.drafters.tree_growth import grow_tree


def default_layout(target: TargetShape) -> tuple[tuple[int, ...], dict]:
    """Feature layers and default hyper-parameters for a head on `target`: the final state; sizes fixed by H."""
    return (target.num_layers,), {}


class MedusaHeads(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int = 4) -> None:
        super().__init__()
        heads = [nn.Linear(hidden_size, hidden_size) for _ in range(num_heads)]
        self.heads = nn.ModuleList(heads)
        for head in heads:
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    @property
    def num_heads(self) -> int:
        return len(self.heads)

    def forward(self, hidden: torch.Tensor, count: int | None = None) -> torch.Tensor:
        """(..., H) last hidden states -> (..., K', H) inputs of the LM head for the first K' heads."""
        heads = self.heads[: count or self.num_heads]
        return torch.stack([hidden + F.silu(head(hidden)) for head in heads], dim=-2)


class MedusaDrafter(HeadDrafter):
    """Reads the final, normed hidden state (feature layer num_layers); stateless."""

    module: MedusaHeads

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler,
                features: list[torch.Tensor] | None = None) -> Draft | None:
        if not has_features(features):
            return None
        with torch.inference_mode():
            hidden = self.module(features[0][-1], min(k, self.module.num_heads))  # (K', H)
            tokens, q = sampler.draw(self.parts.logits(hidden))  # (K',), (K', V)
        return as_draft(tokens, q)

    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int, sampler: TokenSampler,
                     features: list[torch.Tensor] | None = None) -> TreeDraft | None:
        """Medusa's tree: level d's children come from head d's q, whatever the path (heads see no drafts);
        grown and pruned by path probability like the other trees (tree_growth.py)."""
        if not has_features(features):
            return None
        with torch.inference_mode():
            hidden = self.module(features[0][-1], min(depth, self.module.num_heads))  # (D, H)
            logits = self.parts.logits(hidden)  # (D, V)
        levels = iter(range(1, logits.shape[0]))

        def expand(tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
            return logits[next(levels)].expand(tokens.numel(), -1)  # (F, V): one round per level

        return grow_tree(logits[0], expand, logits.shape[0], budget, sampler)


MODULE, DRAFTER = MedusaHeads, MedusaDrafter  # the trained module and the drafter that runs it (heads/format.py)
