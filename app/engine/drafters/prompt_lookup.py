"""Prompt lookup decoding: continue the most recent earlier occurrence of the last n tokens.

For n from max_ngram down to min_ngram, find where the last n tokens of the
committed sequence occurred before, and propose the tokens that followed that
occurrence. Among the occurrences, the most recent one with a full K tokens
after it wins (code repeats what it just wrote); an occurrence too close to
the end to offer K tokens is used only when none offers more.
As a tree drafter, several occurrences become several branches: the distinct
continuations of the longest n-gram's occurrences in that same order, then,
budget permitting, those of shorter n-grams, merged into a trie (shared
prefixes share nodes), so the first branch is the chain's proposal.
Deterministic: q is one-hot.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import TreeDraft, merge_continuations
from app.engine.drafters.base import Draft


def lookup_occurrences(ids: torch.Tensor, k: int, max_ngram: int, min_ngram: int) -> Iterator[tuple[int, list[int]]]:
    """Per n from the longest down, the starts of the continuations that followed an earlier match of the last
    n tokens, preferred first: the most tokens offered (up to k), then the latest."""
    n_ids = ids.numel()
    for n in range(min(max_ngram, n_ids - 1), min_ngram - 1, -1):
        windows = ids[:-1].unfold(0, n, 1)  # (N-n, n): n-grams that have a successor
        starts = (windows == ids[-n:]).all(dim=1).nonzero().flatten()
        if starts.numel():
            offered = (n_ids - n - starts).clamp(max=k)  # (M,) continuation length of each occurrence
            preference = (offered * (n_ids + 1) + starts).argsort(descending=True)  # longest, then latest
            yield n, (starts[preference] + n).tolist()


def lookup_continuation(ids: torch.Tensor, k: int, max_ngram: int, min_ngram: int) -> torch.Tensor | None:
    """Tokens (<= k,) that followed an earlier match of the longest suffix n-gram that has one."""
    for _, follows in lookup_occurrences(ids, k, max_ngram, min_ngram):
        return ids[follows[0]: follows[0] + k]
    return None


def lookup_branches(ids: torch.Tensor, depth: int, budget: int, max_ngram: int, min_ngram: int) -> TreeDraft | None:
    """The distinct continuations (<= depth tokens) of every match, longest n-gram first, as a trie of <= budget
    nodes; the first branch is `lookup_continuation(ids, depth, ...)`."""
    host = ids.tolist()
    continuations: list[tuple[int, ...]] = []
    prefixes: set[tuple[int, ...]] = set()  # the trie's nodes so far, as the paths that reach them
    for _, follows in lookup_occurrences(ids, depth, max_ngram, min_ngram):
        for follow in follows:
            continuation = tuple(host[follow: follow + depth])
            if continuation in prefixes:
                continue  # a repeat of (the start of) an earlier branch
            fresh = [continuation[:i] for i in range(1, len(continuation) + 1) if continuation[:i] not in prefixes]
            continuations.append(continuation)
            prefixes.update(fresh)
            if len(prefixes) >= budget:
                return merge_continuations(continuations, budget)
    return merge_continuations(continuations, budget)


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

    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int, sampler: TokenSampler,
                     features=None) -> TreeDraft | None:
        return lookup_branches(ids, depth, budget, self.max_ngram, self.min_ngram)
