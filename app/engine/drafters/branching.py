"""Branches for the counting drafters: a token tree grown from their preferred chain (docs/ALGORITHMS.md §8).

The n-gram cache and the suffix tree know, after any path of drafted tokens,
which tokens followed it and how often. Their chain follows the most frequent
successor step by step; their tree starts with that chain, so its first branch
is exactly the chain and a tree never loses the chain's first choice, then
spends the rest of the node budget best first by path frequency, the product
of the successors' shares along the path (SuffixDecoding's greedy expansion).
Siblings are distinct tokens, tried in order of their path frequency.
Deterministic: the tree carries no q.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence

import torch

from app.engine.core.tree import ROOT, TreeDraft

# The successors of a path of drafted tokens (() = right after the committed sequence), best first:
# (token, share), share = that token's fraction of what followed the path.
Successors = Callable[[tuple[int, ...]], Sequence[tuple[int, float]]]


def grow_from_chain(chain: Sequence[int], successors: Successors, depth: int, budget: int,
                    min_path: float = 0.0) -> TreeDraft | None:
    """The chain (cut to `budget` nodes), then the most frequent other paths, within `budget` nodes and `depth`
    levels; a node whose path frequency is below `min_path` is left out. None when the chain is empty."""
    chain = list(chain)[: min(depth, budget)]
    if not chain:
        return None
    memo: dict[tuple[int, ...], Sequence[tuple[int, float]]] = {}

    def ranked(path: tuple[int, ...]) -> Sequence[tuple[int, float]]:
        if path not in memo:
            memo[path] = successors(path)
        return memo[path]

    paths: list[tuple[int, ...]] = []
    parents: list[int] = []
    frequency: list[float] = []
    child_of: dict[tuple[int, int], int] = {}

    def add(parent: int, token: int, share: float) -> None:
        child_of[(parent, token)] = len(paths)
        paths.append((() if parent == ROOT else paths[parent]) + (token,))
        parents.append(parent)
        frequency.append((1.0 if parent == ROOT else frequency[parent]) * share)

    for token in chain:
        parent = len(paths) - 1 if paths else ROOT
        add(parent, token, dict(ranked(() if parent == ROOT else paths[parent])).get(token, 0.0))

    frontier: list[tuple[float, int, int, int, float]] = []  # (-path frequency, order, parent, token, share)
    order = itertools.count()

    def offer(parent: int) -> None:
        path = () if parent == ROOT else paths[parent]
        if len(path) >= depth:
            return
        base = 1.0 if parent == ROOT else frequency[parent]
        for token, share in ranked(path):
            if base * share < min_path:
                break  # best first: the rest are rarer still
            if (parent, token) not in child_of:
                heapq.heappush(frontier, (-base * share, next(order), parent, token, share))

    for node in (ROOT, *range(len(paths))):
        offer(node)
    while frontier and len(paths) < budget:
        _, _, parent, token, share = heapq.heappop(frontier)
        add(parent, token, share)
        offer(len(paths) - 1)
    # Nodes in the order they were added: parents first, siblings in order of path frequency (the chain's first).
    return TreeDraft(torch.tensor([path[-1] for path in paths], dtype=torch.long),
                     torch.tensor(parents, dtype=torch.long))
