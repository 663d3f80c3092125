"""An n-gram cache in the style of llama.cpp (common/ngram-cache.cpp).

Tables count, for every n-gram of the context, how often each token followed
it. To draft, take the longest n whose last-n-gram has a successor that was
seen at least `min_count` times and makes at least `min_share` of that
n-gram's successors; propose the most frequent one, append it, and repeat up
to K times. The tables grow incrementally as tokens are committed.
As a tree drafter, every node branches into the successors that pass the same
thresholds at that n, best first: the tree is the chain, then the other paths
by path frequency (the product of the successors' shares), within the budget
(`branching.py`).
Deterministic: q is one-hot.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator

import torch

from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import TreeDraft
from app.engine.drafters.base import Draft
from app.engine.drafters.branching import grow_from_chain


class NgramTables:
    def __init__(self, min_n: int, max_n: int) -> None:
        self.sizes = range(min_n, max_n + 1)
        self.tables: dict[int, dict[tuple[int, ...], Counter]] = {n: defaultdict(Counter) for n in self.sizes}
        self.seen: list[int] = []

    def extend(self, new_tokens: list[int]) -> None:
        for token in new_tokens:
            for n in self.sizes:
                if len(self.seen) >= n:
                    self.tables[n][tuple(self.seen[-n:])][token] += 1
            self.seen.append(token)

    def _observed(self, context: list[int]) -> Iterator[Counter]:
        """The successor counts of the context's last n-gram, for every n seen before, longest first."""
        for n in reversed(self.sizes):
            if len(context) >= n and (successors := self.tables[n].get(tuple(context[-n:]))):
                yield successors

    def best_successor(self, context: list[int], min_count: int, min_share: float) -> int | None:
        for successors in self._observed(context):
            token, count = successors.most_common(1)[0]
            if count >= min_count and count / sum(successors.values()) >= min_share:
                return token
        return None

    def successors(self, context: list[int], min_count: int, min_share: float) -> list[tuple[int, float]]:
        """At the n `best_successor` uses, every successor that passes the thresholds with its share, best
        first (ties: first seen, as `best_successor`); [] when there is none."""
        for successors in self._observed(context):
            total = sum(successors.values())
            passing = [(token, count / total) for token, count in successors.most_common()
                       if count >= min_count and count / total >= min_share]
            if passing:  # the most frequent passes exactly when best_successor stops at this n
                return passing
        return []


class NgramCacheDrafter:
    name = "ngram-cache"

    def __init__(self, min_n: int = 1, max_n: int = 4, min_count: int = 1, min_share: float = 0.0) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.min_count, self.min_share = min_count, min_share
        self.reset()

    feature_layers: tuple[int, ...] = ()

    def reset(self) -> None:
        self.tables = NgramTables(self.min_n, self.max_n)

    def _sync(self, ids: list[int]) -> None:
        seen = self.tables.seen
        if ids[: len(seen)] != seen:
            self.reset()
        self.tables.extend(ids[len(self.tables.seen):])

    def _chain(self, window: list[int], k: int) -> list[int]:
        drafted: list[int] = []
        for _ in range(k):
            token = self.tables.best_successor(window + drafted, self.min_count, self.min_share)
            if token is None:
                break
            drafted.append(token)
        return drafted

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler, features=None) -> Draft | None:
        context = ids.tolist()
        self._sync(context)
        drafted = self._chain(context[-self.max_n:], k)
        return Draft(torch.tensor(drafted, dtype=torch.long), None) if drafted else None

    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int, sampler: TokenSampler,
                     features=None) -> TreeDraft | None:
        context = ids.tolist()
        self._sync(context)
        window = context[-self.max_n:]

        def successors(path: tuple[int, ...]) -> list[tuple[int, float]]:
            return self.tables.successors(window + list(path), self.min_count, self.min_share)

        return grow_from_chain(self._chain(window, depth), successors, depth, budget)
