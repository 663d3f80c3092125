"""Prompt lookup decoding: continue the most recent earlier occurrence of the last n tokens.

For n from max_ngram down to min_ngram, find where the last n tokens of the
committed sequence occurred before, and propose the tokens that followed that
occurrence. Among the occurrences, the most recent one with a full K tokens
after it wins (code repeats what it just wrote); an occurrence too close to
the end to offer K tokens is used only when none offers more.
Deterministic: q is one-hot.
"""

from __future__ import annotations

import torch

from app.engine.drafters.base import Draft
from app.engine.sampling import TokenSampler


def lookup_continuation(ids: torch.Tensor, k: int, max_ngram: int, min_ngram: int) -> torch.Tensor | None:
    """Tokens (<= k,) that followed an earlier match of the longest suffix n-gram that has one."""
    n_ids = ids.numel()
    for n in range(min(max_ngram, n_ids - 1), min_ngram - 1, -1):
        windows = ids[:-1].unfold(0, n, 1)  # (N-n, n): n-grams that have a successor
        starts = (windows == ids[-n:]).all(dim=1).nonzero().flatten()
        if starts.numel():
            offered = (n_ids - n - starts).clamp(max=k)  # (M,) continuation length of each occurrence
            best = int((offered * (n_ids + 1) + starts).argmax())  # longest, then latest
            follow = int(starts[best]) + n
            return ids[follow: follow + k]
    return None


class PromptLookupDrafter:
    name = "prompt-lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    feature_layers: tuple[int, ...] = ()

    def reset(self) -> None:
        pass

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler, features=None) -> Draft | None:
        tokens = lookup_continuation(ids, k, self.max_ngram, self.min_ngram)
        return Draft(tokens.clone(), None) if tokens is not None and tokens.numel() else None
