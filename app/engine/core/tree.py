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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from app.engine.core import rowwise
from app.engine.core.transfer import to_device
from app.engine.core.verify import fetch

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


@dataclass(frozen=True, eq=False)
class TreeLayout:
    """The index tensors a tree's rules and event gather with, on the device, copied there in one transfer
    before the verification forward is queued (a copy queued after it would wait for the forward)."""

    tokens: Tensor  # (n,) long: x_i
    parent_rows: Tensor  # (n,) long: row_of(π(i))
    first_children: Tensor  # (n+1,) long: per row, its node's first child; 0 for a leaf
    ranks: tuple[tuple[Tensor, Tensor], ...]  # per sibling rank r: the rows whose node has an r-th child, that child

    @classmethod
    def of(cls, tree: TreeDraft, device: torch.device) -> TreeLayout:
        ranks = _sibling_ranks(tree)
        pieces = [tree.tokens.tolist(), [row_of(parent) for parent in tree.parents.tolist()], _first_children(tree)]
        pieces += [part for rank in ranks for part in rank]
        flat = torch.tensor([v for piece in pieces for v in piece], dtype=torch.long)
        flat = to_device(flat, device)  # the one copy
        tokens, parent_rows, first_children, *rest = flat.split([len(piece) for piece in pieces])
        return cls(tokens, parent_rows, first_children, tuple(zip(rest[0::2], rest[1::2], strict=True)))


def _sibling_ranks(tree: TreeDraft) -> list[tuple[list[int], list[int]]]:
    """Per sibling rank r: the rows of the parents that have an r-th child, and those children."""
    ranks: list[tuple[list[int], list[int]]] = []
    count: dict[int, int] = {}
    for child, parent in enumerate(tree.parents.tolist()):
        rank = count[parent] = count.get(parent, -1) + 1
        if rank == len(ranks):
            ranks.append(([], []))
        ranks[rank][0].append(row_of(parent))
        ranks[rank][1].append(child)
    return ranks


def _first_children(tree: TreeDraft) -> list[int]:
    """Per row (n+1): the first child of its node, 0 for a leaf."""
    first = [0] * (len(tree) + 1)
    for child, parent in reversed(list(enumerate(tree.parents.tolist()))):
        first[row_of(parent)] = child
    return first


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
    return greedy_tree_verdict(tree, y.tolist(), y)


def greedy_tree_verdict(tree: TreeDraft, y_host: list[int], target_ids: Tensor) -> TreeVerdict:
    """`verify_tree_greedy` on the host, from each row's argmax `y_host` (n+1 ints; `target_ids` the same as a
    tensor): a pass reads the argmax together with its event's numbers, then walks the tree."""
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
    return TreeVerdict(tuple(path), y_host[row_of(node)], target_ids, tuple(tried))


def verify_tree_sampling(tree: TreeDraft, p: Tensor, generator: torch.Generator) -> TreeVerdict:
    """Lossless tree verification; p (n+1, V) warped target probabilities on the generator's device.

    `sampled_walk` read back on its own (a pass reads it together with its event's numbers).
    """
    walk = sampled_walk(tree, TreeLayout.of(tree, p.device), p, generator)
    return walk.finish(fetch(walk.reads))


@dataclass(frozen=True, eq=False)
class TreeEnd:
    """Where a sampled walk ended, on the device, so that the event's numbers are gathered without waiting."""

    row: Tensor  # (1,) long: row_of the path's end
    next_token: Tensor  # (1,) long: drawn from `residual`
    residual: Tensor  # (V,) float32: p' after every child of the end was rejected; p of its row at a leaf
    rejected: Tensor  # (1,) long: the end's first child, tried and rejected (node 0 at a leaf: not shown)


@dataclass(frozen=True, eq=False)
class SampledWalk:
    """The sampling rule on the device: what the host reads (one transfer) and how it finishes the verdict."""

    tree: TreeDraft
    reads: dict[str, Tensor]  # "tree_path" (depth,) with ROOT after the end, "next_token" (1,), per node (n,)
    # "accept_prob" and "u", and "target_ids" (n+1,): argmax p per row
    end: TreeEnd

    def finish(self, host: Mapping[str, Tensor]) -> TreeVerdict:
        tree = self.tree
        path = [node for node in host["tree_path"].tolist() if node != ROOT]
        tried: list[int] = []
        for node, taken in zip([ROOT, *path], [*path, None], strict=True):
            children = tree.children(node)
            tried.extend(children if taken is None else children[: children.index(taken) + 1])
        chance, u = host["accept_prob"].tolist(), host["u"].tolist()
        rejected = bool(tree.children(path[-1] if path else ROOT))
        return TreeVerdict(tuple(path), int(host["next_token"][0]), host["target_ids"], tuple(tried),
                           {c: chance[c] for c in tried}, {c: u[c] for c in tried},
                           self.end.residual if rejected else None)


def sampled_walk(tree: TreeDraft, layout: TreeLayout, p: Tensor, generator: torch.Generator,
                 batched: bool | None = None) -> SampledWalk:
    """The sampling rules of §9.3 over a tree: which children are accepted, the end's residual and its draw.

    Draws, in this order: one uniform per node (used when the node is tried), one sample from the end's p'. On
    an accelerator (`batched`, the default there) every row's trials run at once and the walk follows them
    without reading anything back (`_batched_walk`); on the CPU, where a read costs nothing and a trial of every
    row would cost most of a pass, the walk tries one reached child at a time (`_host_walk`). The same uniforms
    and the same draw: both decide the same.
    """
    u = torch.rand(len(tree), generator=generator, device=p.device)  # (n,)
    if batched if batched is not None else p.device.type != "cpu":
        return _batched_walk(tree, layout, p, u, generator)
    return _host_walk(tree, layout, p, u, generator)


def _host_walk(tree: TreeDraft, layout: TreeLayout, p: Tensor, u: Tensor, generator: torch.Generator) -> SampledWalk:
    """§9.3 as written: from the root, each reached node's children in order against the running p'."""
    q = tree.q.float() if tree.iid and tree.q is not None else None  # (n, V)
    chance = torch.zeros(len(tree))  # (n,) each tried node's acceptance probability
    path: list[int] = []
    node = ROOT
    while True:
        p_prime, accepted = p[row_of(node)][None].float(), None  # (1, V)
        for child in tree.children(node):
            x, q_row = layout.tokens[child][None], None if q is None else q[child][None]  # (1,), (1, V)
            chance[child] = _acceptance(p_prime, q_row, x)[0]
            if u[child] < chance[child]:
                accepted = child
                break
            p_prime = _residual(p_prime, q_row, x)
        if accepted is None:
            break
        path.append(accepted)
        node = accepted
    residual = p_prime[0]  # (V,)
    next_token = torch.multinomial(residual, 1, generator=generator)  # (1,)
    row = torch.tensor([row_of(node)])  # (1,)
    steps = path + [ROOT] * (max(tree.depths, default=0) - len(path))  # the batched walk's shape
    reads = {"tree_path": torch.tensor(steps, dtype=torch.long), "next_token": next_token, "accept_prob": chance,
             "u": u, "target_ids": rowwise.argmax(p)}
    return SampledWalk(tree, reads, TreeEnd(row, next_token, residual, layout.first_children.index_select(0, row)))


def _batched_walk(tree: TreeDraft, layout: TreeLayout, p: Tensor, u: Tensor,
                  generator: torch.Generator) -> SampledWalk:
    """Both sampling rules for every node at once, then the walk down the accepted children, all on the device.

    Each row runs its children's trials as if it were reached (rank by rank: the r-th children of all rows
    together); the walk then follows the accepted child from the root, so only reached rows count. Every
    tried child still meets a fresh uniform against its own row's running p', hence the rule of §9.3 exactly.
    """
    n, device = len(tree), p.device
    running = p.float().clone()  # (n+1, V) p' of every row
    accepted = torch.full((n + 1,), ROOT, dtype=torch.long, device=device)  # (n+1,) each row's accepted child
    chance = torch.zeros(n, device=device)  # (n,) each node's acceptance probability, were it tried
    tokens = layout.tokens  # (n,)
    q = tree.q.to(device).float() if tree.iid and tree.q is not None else None  # (n, V)
    for rows, children in layout.ranks:  # (m,) each; rows distinct
        still_open = accepted[rows] == ROOT  # (m,) no earlier sibling accepted
        p_prime, x = running[rows], tokens[children]  # (m, V), (m,)
        q_rows = None if q is None else q[children]  # (m, V)
        c = _acceptance(p_prime, q_rows, x)  # (m,)
        chance[children] = c
        take = still_open & (u[children] < c)  # (m,)
        accepted[rows] = torch.where(take, children, accepted[rows])
        running[rows] = _residual(p_prime, q_rows, x)  # a row that has accepted never reads its p' again
    row = torch.zeros(1, dtype=torch.long, device=device)  # (1,) the root's row
    steps = []
    for _ in range(max(tree.depths, default=0)):
        child = accepted.index_select(0, row)  # (1,) ROOT past the end
        steps.append(child)
        row = torch.where(child == ROOT, row, child + 1)
    residual = running.index_select(0, row)[0]  # (V,)
    next_token = torch.multinomial(residual, 1, generator=generator)  # (1,)
    reads = {"tree_path": torch.cat(steps) if steps else accepted[:0], "next_token": next_token,
             "accept_prob": chance, "u": u, "target_ids": rowwise.argmax(p)}
    return SampledWalk(tree, reads, TreeEnd(row, next_token, residual, layout.first_children.index_select(0, row)))


def _acceptance(p_prime: Tensor, q_rows: Tensor | None, x: Tensor) -> Tensor:
    """min(1, p'(x) / q(x)) per row; p'(x) for deterministic children; 0 when p'(x) = 0. (m, V), (m,) -> (m,)."""
    p_x = p_prime.gather(1, x[:, None]).squeeze(1)  # (m,)
    if q_rows is None:
        return p_x
    ratio = p_x / q_rows.gather(1, x[:, None]).squeeze(1)  # inf where q(x) = 0 < p'(x)
    return torch.where(p_x > 0, ratio.clamp(max=1.0), 0.0)


def _residual(p_prime: Tensor, q_rows: Tensor | None, x: Tensor) -> Tensor:
    """p' after rejecting x, per row: x zeroed (deterministic) or max(0, p' - q) (i.i.d.), renormalised.

    (m, V), (m,) -> (m, V). Where nothing is left (possible only through rounding), p' is kept: the next
    draw then still follows p'.
    """
    r = p_prime.scatter(1, x[:, None], 0.0) if q_rows is None else (p_prime - q_rows).clamp(min=0.0)
    total = r.sum(1, keepdim=True)  # (m, 1)
    return torch.where(total > 0, r / total, p_prime)
