"""Growing a token tree from a drafter's distributions (EAGLE-2's dynamic trees; docs/ALGORITHMS.md §9.2).

Notation as in `app/engine/core/tree.py`. A node's score is the log of its path
probability under the drafter, sum of log q along the path. Each round
expands the `width` best-scoring nodes of the newest level: the drafter scores
them in one forward (`expand`), and each gets children from its q.

- Greedy (chosen children): each expanded node proposes its `width` likeliest
  tokens; at the end the `budget` best nodes by score are kept (a path's
  score never rises, so the kept set is a tree) and siblings are tried best first.
- Sampling (children drawn i.i.d. from q, for SpecInfer's rule): how many
  children a node gets is decided before they are drawn, children keep their
  draw order, and nothing is pruned after a draw; otherwise the drafts would
  no longer be i.i.d. from q and the rule would not be lossless.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from app.engine.core import rowwise
from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import ROOT, TreeDraft, best_nodes, subtree

MAX_WIDTH = 8  # children per expanded node and nodes expanded per round, at most

# Scores the given new rows in one drafter forward: tokens (F,), parents (F,) indexing earlier expanded rows
# (-1: a child of the root) -> the drafter's logits (F, V) after each row.
Expand = Callable[[Tensor, Tensor], Tensor]


def tree_width(budget: int, depth: int) -> int:
    """Children per node and nodes per round: enough to spend the budget over the depth, 2 to MAX_WIDTH."""
    return max(2, min(MAX_WIDTH, math.ceil(budget / max(depth, 1))))


@dataclass
class _Nodes:
    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    q: list[Tensor] = field(default_factory=list)  # the distribution each node was drawn from (its parent's q)
    fed_row: dict[int, int] = field(default_factory=dict)  # node -> its row among the expanded rows

    def path_tokens(self, node: int) -> Tensor:
        """The tokens from the root's child down to `node`: the node's context after the sequence."""
        tokens = []
        while node != ROOT:
            tokens.append(self.tokens[node])
            node = self.parents[node]
        return torch.tensor(tokens[::-1], dtype=torch.long)

    def add(self, token: int, parent: int, score: float, q: Tensor) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.scores.append(score)
        self.q.append(q)
        return len(self.tokens) - 1


def grow_tree(root_logits: Tensor, expand: Expand, depth: int, budget: int, sampler: TokenSampler) -> TreeDraft:
    """A tree of at most `budget` nodes and `depth` levels; root_logits (V,) are the drafter's after the sequence.

    Every row's logits become q through `sampler` for the row's own context (the repetition controls), so
    each node's q is what the chain drafter would have drawn it from along the same path.
    """
    width = tree_width(budget, depth)
    iid = not sampler.is_greedy
    nodes = _Nodes()
    left = budget
    root_q = sampler.probs(sampler.process(root_logits[None], [torch.empty(0, dtype=torch.long)])[0])  # (V,)
    level = _add_children(nodes, ROOT, root_q, min(width, left), 0.0, sampler)
    left -= len(level) if iid else 0
    for _ in range(depth - 1):
        if not level or (iid and left <= 0):
            break
        frontier = sorted(level, key=lambda i: (-nodes.scores[i], i))[:width]
        rows = torch.tensor([nodes.fed_row.get(nodes.parents[i], -1) for i in frontier], dtype=torch.long)
        logits = expand(torch.tensor([nodes.tokens[i] for i in frontier], dtype=torch.long), rows)  # (F, V)
        q_rows = sampler.probs(sampler.process(logits, [nodes.path_tokens(i) for i in frontier]))  # (F, V)
        for i in frontier:
            nodes.fed_row[i] = len(nodes.fed_row)
        level = []
        for i, q in zip(frontier, q_rows, strict=True):
            count = min(width, left) if iid else width
            level += _add_children(nodes, i, q, count, nodes.scores[i], sampler)
            left -= count if iid else 0
    tokens = torch.tensor(nodes.tokens, dtype=torch.long)
    parents = torch.tensor(nodes.parents, dtype=torch.long)
    if iid:
        return TreeDraft(tokens, parents, torch.stack(nodes.q), iid=True)  # q (n, V)
    order = best_nodes(parents, torch.tensor(nodes.scores), budget)
    return subtree(tokens, parents, order, torch.stack([nodes.q[i] for i in order]))


def _add_children(nodes: _Nodes, parent: int, q: Tensor, count: int, score: float,
                  sampler: TokenSampler) -> list[int]:
    """`count` children of `parent` from q (V,): its likeliest distinct tokens, or i.i.d. draws when sampling."""
    if count <= 0:
        return []
    if sampler.is_greedy:
        values, ids = rowwise.topk(q, count)
        picked = [(int(t), float(v)) for t, v in zip(ids.tolist(), values.tolist(), strict=True) if v > 0]
    else:
        ids = torch.multinomial(q, count, replacement=True, generator=sampler.generator)
        picked = [(int(t), float(q[t])) for t in ids.tolist()]
    return [nodes.add(token, parent, score + math.log(prob), q) for token, prob in picked]
