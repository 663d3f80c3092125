"""An n-gram cache in the style of llama.cpp (common/ngram-cache.cpp).

Tables count, for every n-gram of the context, how often each token followed
it. To draft, take the longest n whose last-n-gram has a successor that was
seen at least `min_count` times and makes at least `min_share` of that
n-gram's successors; propose the most frequent one, append it, and repeat up
to K times. The tables grow incrementally as tokens are committed.
Deterministic: q is one-hot.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import torch

from app.engine.drafters.base import Draft
from app.engine.sampling import TokenSampler


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

    def best_successor(self, context: list[int], min_count: int, min_share: float) -> int | None:
        for n in reversed(self.sizes):
            if len(context) < n:
                continue
            successors = self.tables[n].get(tuple(context[-n:]))
            if not successors:
                continue
            token, count = successors.most_common(1)[0]
            if count >= min_count and count / sum(successors.values()) >= min_share:
                return token
        return None


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

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler, features=None) -> Draft | None:
        context = ids.tolist()
        self._sync(context)
        window = context[-self.max_n:]
        drafted: list[int] = []
        for _ in range(k):
            token = self.tables.best_successor(window + drafted, self.min_count, self.min_share)
            if token is None:
                break
            drafted.append(token)
        return Draft(torch.tensor(drafted, dtype=torch.long), None) if drafted else None
