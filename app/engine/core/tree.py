"""Token trees: a draft of several continuations, verified in one target forward (docs/ALGORITHMS.md §9).

Notation. The committed sequence has N tokens; its last token is the *root* r
(fed to the target in the verification pass, as in a chain). A tree draft has
n nodes 0 .. n-1 in topological order (a parent comes before its children);
node i holds token x_i and parent π(i) in {-1} ∪ [0, i), -1 meaning the root.
Its depth d_i = d_π(i) + 1 (the root has depth 0) and its position in the
sequence is N - 1 + d_i. Siblings are listed in the order they are tried.

The verification forward feeds [r, x_0 .. x_{n-1}] (n+1 rows): row 0 is the
root, row i+1 is node i; row j sees the committed prefix, its ancestors and
itself. Row 0 scores the root's children, row i+1 the children of node i, so
the logits z are (n+1, V) and `row(i) = i + 1`, `row(-1) = 0`.

Rules (each returns a `TreeVerdict`: the accepted path and one appended token):

- greedy: from the root, move to the child whose token equals argmax z of the
  current row, while there is one; append the argmax after the path's end.
  Equals greedy decoding: every kept token is the argmax after its prefix.
- sampling, deterministic children (distinct tokens, no q): at each reached
  node let p' = p of its row; try the children in order, accepting x with
  probability p'(x), else set p'(x) = 0 and renormalise; if none is accepted,
  draw from p'; at a leaf draw the bonus from p.
- sampling, children drawn i.i.d. from q (SpecInfer's multi-round rule):
  accept x with probability min(1, p'(x) / q(x)), else p' <- norm(max(0, p' - q));
  if none is accepted, draw from p'.

Both sampling rules keep the output distributed exactly as p (the proof is in
docs/ALGORITHMS.md §9.3). A chain is the tree whose every node has one child.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from app.engine.core import rowwise

ROOT = -1


@dataclass(frozen=True, eq=False)
class TreeDraft:
    """Nodes of a draft tree, in topological order, siblings in the order they are tried."""

    tokens: Tensor  # (n,) long on CPU: x_i
    parents: Tensor  # (n,) long on CPU: π(i) in {-1} ∪ [0, i)
    q: Tensor | None = None  # (n, V): the distribution node i was drawn from (its parent's q); None = no q
    iid: bool = False  # siblings were drawn i.i.d. from q (SpecInfer's rule) rather than chosen distinct

    def __post_init__(self) -> None:
        n = self.tokens.numel()
        if self.parents.shape != (n,) or (n and bool((self.parents >= torch.arange(n)).any())):
            raise ValueError("a tree's parents must be (n,) with every parent before its child (-1 = the root)")
        if self.iid and self.q is None:
            raise ValueError("children drawn i.i.d. from q need q")

    def __len__(self) -> int:
        return self.tokens.numel()

    @classmethod
    def chain(cls, tokens: Tensor, q: Tensor | None = None) -> TreeDraft:
        """The tree of one chain: node i is the only child of node i-1."""
        n = tokens.numel()
        return cls(tokens.long().cpu(), torch.arange(-1, n - 1), q, iid=q is not None)

    @property
    def depths(self) -> list[int]:
        """d_i, 1 for the root's children."""
        depths: list[int] = []
        for parent in self.parents.tolist():
            depths.append(1 if parent == ROOT else depths[parent] + 1)
        return depths

    def children(self, node: int) -> list[int]:
        """The children of `node` (ROOT for the root's), in the order they are tried."""
        return (self.parents == node).nonzero().flatten().tolist()

    def path_to(self, node: int) -> list[int]:
        """Nodes from the root's child down to `node`."""
        return _with_ancestors(node, self.parents.tolist())[::-1]

    @property
    def is_chain(self) -> bool:
        return bool((self.parents == torch.arange(-1, len(self) - 1)).all())


# ---------------------------------------------------------------- building trees


def merge_continuations(continuations: Sequence[Sequence[int]], budget: int) -> TreeDraft | None:
    """A trie of token sequences, preferred first, within `budget` nodes (shared prefixes share nodes).

    Deterministic drafters (prompt lookup, n-gram cache, suffix trees) turn their candidate continuations
    into branches this way; a node's children are tried in the order their first sequence came.
    """
    tokens: list[int] = []
    parents: list[int] = []
    child_of: dict[tuple[int, int], int] = {}
    for sequence in continuations:
        parent = ROOT
        for token in sequence:
            node = child_of.get((parent, int(token)))
            if node is None:
                if len(tokens) >= budget:
                    break
                node = len(tokens)
                tokens.append(int(token))
                parents.append(parent)
                child_of[(parent, int(token))] = node
            parent = node
    if not tokens:
        return None
    return TreeDraft(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long))


def best_nodes(parents: Tensor, scores: Tensor, budget: int) -> list[int]:
    """The `budget` nodes of highest score, whose scores never rise along a path (path probabilities), so the
    kept set is closed under ancestors (EAGLE-2's re-ranking); ties keep the earlier node. Returned in the
    order of a tree draft: breadth first, each node's children best first.

    parents, scores: (n,) on CPU, in topological order.
    """
    parent_of = parents.tolist()
    score_of = scores.tolist()
    kept: set[int] = set()
    for i in sorted(range(len(parent_of)), key=lambda i: (-score_of[i], i)):
        chain = [n for n in _with_ancestors(i, parent_of) if n not in kept]  # ancestors too: ties must not orphan
        if len(kept) + len(chain) <= budget:
            kept.update(chain)
    children: dict[int, list[int]] = {}
    for node in sorted(kept, key=lambda c: (-score_of[c], c)):
        children.setdefault(parent_of[node], []).append(node)
    order: list[int] = []
    frontier = [ROOT]
    while frontier:
        start = len(order)
        for parent in frontier:
            order.extend(children.get(parent, ()))
        frontier = order[start:]
    return order


def subtree(tokens: Tensor, parents: Tensor, order: list[int], q: Tensor | None = None) -> TreeDraft:
    """The tree of the nodes `order` (closed under ancestors, parents listed before children), renumbered."""
    index = {old: new for new, old in enumerate(order)}
    parent_of = parents.tolist()
    new_parents = [ROOT if parent_of[i] == ROOT else index[parent_of[i]] for i in order]
    return TreeDraft(tokens[torch.tensor(order, dtype=torch.long)].long().cpu(),
                     torch.tensor(new_parents, dtype=torch.long), q)


def _with_ancestors(node: int, parent_of: list[int]) -> list[int]:
    nodes = []
    while node != ROOT:
        nodes.append(node)
        node = parent_of[node]
    return nodes


# ---------------------------------------------------------------- the verification forward


def verification_parents(tree: TreeDraft) -> Tensor:
    """Parents (n+1,) of the verification rows [root, nodes]: -1 for the root (row 0), its parent's row for node i."""
    return torch.cat([torch.tensor([ROOT]), tree.parents + 1])  # ROOT + 1 = 0 is the root's row


def row_of(node: int) -> int:
    """The verification row that scores the children of `node` (ROOT: row 0)."""
    return node + 1


class TreeRows:
    """Rows fed after a sequence as a tree (a CachedModel's tail, a drafter's tree rounds): tokens, parents,
    depths (ancestors among the rows) and which rows each row sees."""

    def __init__(self) -> None:
        self.tokens = torch.empty(0, dtype=torch.long)  # (T,)
        self.parents: list[int] = []
        self.depths = torch.empty(0, dtype=torch.long)  # (T,)
        self.sees = torch.empty(0, 0, dtype=torch.bool)  # (T, T): row i sees tail row j
        self.features: list[torch.Tensor] = []  # per feature layer: (T, H)
        self._lines: list[tuple[int, ...]] = []  # per row: its ancestors among the rows and itself

    def __len__(self) -> int:
        return self.tokens.numel()

    def add(self, tokens: torch.Tensor, parents: torch.Tensor) -> None:
        old, new = len(self), tokens.numel()
        for i, parent in enumerate(parents.tolist(), start=old):
            if not -1 <= parent < i:
                raise ValueError(f"tail row {i} has parent {parent}: parents must come earlier (or be -1)")
            self._lines.append((self._lines[parent] if parent >= 0 else ()) + (i,))
            self.parents.append(parent)
        total = old + new
        sees = torch.zeros(total, total, dtype=torch.bool)
        sees[:old, :old] = self.sees
        fresh = self._lines[old:]
        rows = [i for i, line in enumerate(fresh, start=old) for _ in line]
        sees[rows, [j for line in fresh for j in line]] = True
        self.sees = sees
        self.tokens = torch.cat([self.tokens, tokens.long()])
        self.depths = torch.cat([self.depths, torch.tensor([len(line) - 1 for line in fresh], dtype=torch.long)])


# ---------------------------------------------------------------- rules


@dataclass(frozen=True, eq=False)
class TreeVerdict:
    """What a tree rule decided: the accepted path, the token appended after it, and how each node fared."""

    path: tuple[int, ...]  # accepted nodes, root's child first
    next_token: int  # correction after the path (some child was tried and rejected) or bonus (a leaf)
    target_ids: Tensor  # (n+1,) long: argmax of each row
    tried: tuple[int, ...]  # nodes compared with the target, in the order they were tried
    accept_prob: dict[int, float] | None = None  # sampling: per tried node, the probability it was accepted with
    u: dict[int, float] | None = None  # sampling: per tried node, the uniform draw
    residual: Tensor | None = None  # sampling: (V,) p' the appended token was drawn from, if it was a correction

    @property
    def n_accepted(self) -> int:
        return len(self.path)

    def outcome(self, node: int) -> str:
        if node in self.path:
            return "accepted"
        return "rejected" if node in self.tried else "not_reached"


def verify_tree_greedy(tree: TreeDraft, logits: Tensor) -> TreeVerdict:
    """Strict greedy on a tree: the longest path of argmax matches; logits (n+1, V)."""
    y = rowwise.argmax(logits)  # (n+1,)
    y_host = y.tolist()
    tokens = tree.tokens.tolist()
    path: list[int] = []
    tried: list[int] = []
    node = ROOT
    while True:
        children = tree.children(node)
        match = next((c for c in children if tokens[c] == y_host[row_of(node)]), None)
        tried.extend(children if match is None else children[: children.index(match) + 1])
        if match is None:
            break
        path.append(match)
        node = match
    # Greedy compares every child with the argmax at once; all non-matching children of reached nodes are rejected.
    tried = sorted(set(tried) | {c for n in [ROOT, *path] for c in tree.children(n)})
    return TreeVerdict(tuple(path), y_host[row_of(node)], y, tuple(tried))


def verify_tree_sampling(tree: TreeDraft, p: Tensor, generator: torch.Generator) -> TreeVerdict:
    """Lossless tree verification; p (n+1, V) warped target probabilities on the generator's device.

    Deterministic children are tried as one-hot drafts against the running residual; children drawn i.i.d.
    from q (tree.iid) use SpecInfer's multi-round rule. Draws: one uniform per tried child, one final sample.
    """
    tokens = tree.tokens.tolist()
    path: list[int] = []
    tried: list[int] = []
    accept_prob: dict[int, float] = {}
    draws: dict[int, float] = {}
    node = ROOT
    residual: Tensor | None = None
    while True:
        children = tree.children(node)
        if not children:
            residual = None
            break
        p_prime = p[row_of(node)].float().clone()  # (V,)
        accepted = None
        for child in children:
            x = tokens[child]
            q_row = tree.q[child].to(p_prime.device).float() if tree.iid and tree.q is not None else None
            chance = _acceptance(p_prime, q_row, x)
            u = float(torch.rand((), generator=generator, device=p_prime.device))
            tried.append(child)
            accept_prob[child], draws[child] = chance, u
            if u < chance:
                accepted = child
                break
            p_prime = _residual(p_prime, q_row, x)
        if accepted is None:
            residual = p_prime
            break
        path.append(accepted)
        node = accepted
    final_row = residual if residual is not None else p[row_of(node)].float()
    next_token = int(torch.multinomial(final_row, 1, generator=generator))
    target_ids = rowwise.argmax(p)
    return TreeVerdict(tuple(path), next_token, target_ids, tuple(tried), accept_prob, draws, residual)


def _acceptance(p_prime: Tensor, q_row: Tensor | None, x: int) -> float:
    """min(1, p'(x) / q(x)); p'(x) for a deterministic child; 0 when p'(x) = 0."""
    p_x = float(p_prime[x])
    if q_row is None:
        return p_x
    q_x = float(q_row[x])
    if p_x <= 0.0:
        return 0.0
    return 1.0 if q_x <= 0.0 else min(1.0, p_x / q_x)


def _residual(p_prime: Tensor, q_row: Tensor | None, x: int) -> Tensor:
    """p' after rejecting x: p' with x zeroed (deterministic) or max(0, p' - q) (i.i.d.), renormalised.

    If nothing is left (possible only through rounding), p' is kept: the next draw then still follows p'.
    """
    if q_row is None:
        r = p_prime.clone()
        r[x] = 0.0
    else:
        r = (p_prime - q_row).clamp(min=0.0)
    total = r.sum()
    return r / total if total > 0 else p_prime
