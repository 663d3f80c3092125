"""One verified block as plain data: the drafted and appended tokens of a `PassEvent` and its inspector detail.

Notation (verify.py): drafts `x` (K',), the target's probabilities `p`
(K'+1, V) (warped under sampling, a plain softmax otherwise), the drafter's
`q` (K', V) or None for a deterministic drafter (one-hot q). The rule accepted
`a` drafts; clipping at EOS or the token limit kept `a' <= a` of them; the pass
then appends one target token unless the block ended the generation.

Nothing here touches a model or a cache. A block is read in two steps so that
the pass waits for the device once: `block_reads` (and `tree_reads`) gather on
the device the few numbers the event shows (p and q of the drafts, the top of
each row, the appended token's p, the residual's entries), which the pass reads
back with the verdict's tensors in one transfer (`verify.fetch`); the rest are
pure functions of those host copies, so what the window shows is what the
engine decided. `PassClock` takes the pass's timings without waiting for the device.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor

from app.engine.core import rowwise
from app.engine.core.detok import StreamDetokenizer
from app.engine.core.rules import INSPECT_TOP, AsdBlockStart
from app.engine.core.sampling import MASS_SCALE
from app.engine.core.tree import ROOT, TreeDraft, TreeEnd, TreeLayout, TreeVerdict, row_of
from app.engine.core.verify import Rejection, Verdict, fetch
from app.engine.events import (
    ACCEPTED,
    ASD_EXCEPTION,
    BONUS,
    CLIPPED,
    NOT_REACHED,
    REJECTED,
    RESAMPLED,
    TARGET,
    AppendedToken,
    DraftedToken,
    NodeOutcome,
    Outcome,
    PassDetail,
    ResidualEntry,
    Timing,
    TokenProb,
    TreeNode,
)
from app.engine.runtime.devices import synchronize

Rows = tuple[tuple[TokenProb, ...], ...]


@dataclass(frozen=True)
class ResidualView:
    """The rejected row n for the inspector (see `residual_reads`)."""

    entries: tuple[ResidualEntry, ...]  # largest r first
    other: float  # residual mass outside the entries
    norm: float  # sum_v max(0, p_v - q_v) before normalising


@dataclass(frozen=True)
class Inspection:
    """The host copies of what a pass event shows of the block's distributions."""

    p_x: list[float]  # (K',) p_i(x_i)
    q_x: list[float] | None  # (K',) q_i(x_i); None for one-hot q
    p_appended: list[float]  # (K'+1,) p_i of the token the pass appends when it stops at row i
    p_top: Rows  # K'+1 rows
    q_top: Rows  # K' rows; empty for one-hot q
    residual: ResidualView | None  # the first rejected row under sampling; None without one


@dataclass(frozen=True, eq=False)
class VerifiedBlock:
    """What the target verified and what the rule decided, on the host."""

    drafts: Tensor  # (K',) long on CPU: x
    verdict: Verdict
    seen: Inspection

    @cached_property
    def draft_ids(self) -> list[int]:
        return self.drafts.tolist()


@dataclass(frozen=True)
class Commit:
    """What the pass commits: the first `kept` drafts, then `next_token` unless the block ended the generation."""

    kept: int  # a' <= a
    next_token: int | None

    def ids(self, block: VerifiedBlock) -> list[int]:
        return block.draft_ids[: self.kept] + ([self.next_token] if self.next_token is not None else [])


# ---- reading a block back ------------------------------------------------------------------------


def block_reads(x: Tensor, p: Tensor, q: Tensor | None, candidates: Tensor,
                rejection: Rejection | None, p_top_ids: Tensor | None = None,
                inspect: bool = True) -> dict[str, Tensor]:
    """What the event shows of a block, gathered where p lives; nothing is read back here.

    x (K',) long, p (K'+1, V), candidates (K'+1,) long on p's device; q (K', V) or None. `p_top_ids`
    (K'+1, INSPECT_TOP), when the rule found them already, are the ids of p's largest entries, largest first.
    The inspector's detail (the top of p and q for every row, the residual's entries) is gathered only when
    `inspect`: a run nobody inspects does not pay for its searches of the vocabulary.
    """
    reads = {"p_appended": _at(p, candidates)}
    if x.numel():  # a plain step (K' = 0) has no drafts to gather
        reads["p_x"] = _at(p[: x.numel()], x)
    if q is not None:
        reads["q_x"] = _at(q, x.to(q.device))
    if not inspect:
        return reads
    searched: dict[str, Tensor] = {}  # rows whose top is searched, all in one batched top-k
    if p_top_ids is None:
        searched["p_top"] = p
    else:
        reads |= {"p_top_values": p.gather(1, p_top_ids), "p_top_ids": p_top_ids}
    if q is not None:
        searched["q_top"] = q
    rows = sampled = None
    if rejection is not None:
        sampled = rejection.token
        q_row = None if q is None else q.index_select(0, rejection.row.to(q.device))[0]
        rows = residual_rows(p.index_select(0, rejection.row)[0], q_row, x.index_select(0, rejection.row),
                             rejection.residual)  # (3, V)
        searched["residual"] = rows
    tops = batched_tops(searched)
    reads |= _top_reads({name: top for name, top in tops.items() if name != "residual"})
    if rows is not None and sampled is not None:
        reads |= residual_entries(rows, tops["residual"][1], sampled)
    return reads


def batched_tops(rows: Mapping[str, Tensor]) -> dict[str, tuple[Tensor, Tensor]]:
    """The INSPECT_TOP largest entries of every row of each (R_i, V) tensor, values and ids (R_i, T) each: one
    top-k over all of them where they share a device and a width (one search, one launch), else one each."""
    groups: dict[tuple[torch.device, int], list[str]] = {}
    for name, t in rows.items():
        groups.setdefault((t.device, t.shape[-1]), []).append(name)
    tops: dict[str, tuple[Tensor, Tensor]] = {}
    for names in groups.values():
        values, ids = rowwise.topk(torch.cat([rows[name].float() for name in names]), INSPECT_TOP)
        start = 0
        for name in names:
            end = start + rows[name].shape[0]
            tops[name] = (values[start:end], ids[start:end])
            start = end
    return tops


def inspection(host: Mapping[str, Tensor], rejected: bool) -> Inspection:
    """The host copies of `block_reads` as plain data; the residual only when the block ended in a rejection."""
    has_q = "q_x" in host
    return Inspection(p_x=host["p_x"].tolist() if "p_x" in host else [],
                      q_x=host["q_x"].tolist() if has_q else None,
                      p_appended=host["p_appended"].tolist(),
                      p_top=_top_rows(host, "p_top") if "p_top_ids" in host else (),
                      q_top=_top_rows(host, "q_top") if "q_top_ids" in host else (),
                      residual=residual_view(host) if rejected and "residual_ids" in host else None)


def _at(rows: Tensor, ids: Tensor) -> Tensor:
    """rows[i, ids[i]] for every i: (R, V), (R,) -> (R,)."""
    return rows.gather(1, ids[:, None]).squeeze(1)


def _top_reads(tops: Mapping[str, tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    """`batched_tops` as reads: '<name>_values' and '<name>_ids'."""
    return {f"{name}_{part}": t for name, top in tops.items() for part, t in zip(("values", "ids"), top, strict=True)}


def _top_rows(host: Mapping[str, Tensor], name: str) -> Rows:
    ids, values = host[f"{name}_ids"].tolist(), host[f"{name}_values"].tolist()
    return tuple(tuple(TokenProb(i, v) for i, v in zip(row_i, row_v, strict=True))
                 for row_i, row_v in zip(ids, values, strict=True))


# ---- the residual at a sampled rejection ---------------------------------------------------------


def residual_reads(p_row: Tensor, q_row: Tensor | None, x: Tensor, residual: Tensor,
                   sampled: Tensor) -> dict[str, Tensor]:
    """The rejected row for the inspector, gathered on the device: p, q and r on the union of the top tokens of
    each and the token sampled from r (drawn from anywhere in r, so it may lie outside every top), the residual
    mass outside them, and sum_v max(0, p_v - q_v) before normalising.

    (V,) rows, one-hot q at x when q_row is None; x and sampled (1,) long. The ids may repeat (the host keeps
    one entry per token); the two sums come as exact halves (see `_split_sum`).
    """
    rows = residual_rows(p_row, q_row, x, residual)  # (3, V)
    return residual_entries(rows, rowwise.topk(rows, min(INSPECT_TOP, rows.shape[1]))[1], sampled)


def residual_rows(p_row: Tensor, q_row: Tensor | None, x: Tensor, residual: Tensor) -> Tensor:
    """(3, V) float32: p, q (one-hot at x when q_row is None) and r of the rejected row."""
    p_row = p_row.float()  # (V,)
    q_row = torch.zeros_like(p_row).index_fill(0, x, 1.0) if q_row is None else q_row.float()  # (V,)
    return torch.stack([p_row, q_row, residual.float()])


def residual_entries(rows: Tensor, tops: Tensor, sampled: Tensor) -> dict[str, Tensor]:
    """`residual_reads` from the rows (3, V) and the ids of their top entries (3, k)."""
    p_row, q_row, residual = rows.unbind(0)  # (V,) each
    ids = torch.cat([tops.reshape(-1), sampled])  # (3k+1,)
    outside = torch.ones_like(residual, dtype=torch.bool).index_fill(0, ids, False)  # (V,)
    return {"residual_ids": ids, "residual_p": p_row.index_select(0, ids), "residual_q": q_row.index_select(0, ids),
            "residual_r": residual.index_select(0, ids),
            "residual_other": _split_sum(torch.where(outside, residual, 0.0)),
            "residual_norm": _split_sum((p_row - q_row).clamp(min=0.0))}


def _split_sum(values: Tensor) -> Tensor:
    """(V,) float32 in [0, 1] summing to at most 2 -> (2,) float32 partial sums, added on the host in float64.

    As in `sampling._mask_top_p`: each value is split into a multiple of 1 / MASS_SCALE, whose float32 sum is
    exact, and a remainder below 1 / MASS_SCALE, whose float32 sum is small and so barely rounded: the total
    is as good as a float64 sum on the host, with no float64 on the device and no row copied to the host.
    """
    hi = torch.floor(values * MASS_SCALE) / MASS_SCALE  # (V,) exact
    return torch.stack([hi.sum(), (values - hi).sum()])


def residual_view(host: Mapping[str, Tensor]) -> ResidualView:
    """The host copies of `residual_reads`: one entry per token, empty ones dropped unless sampled."""
    ids = host["residual_ids"].tolist()
    sampled = ids[-1]
    entries = {i: ResidualEntry(i, p, q, r) for i, p, q, r in zip(
        ids, host["residual_p"].tolist(), host["residual_q"].tolist(), host["residual_r"].tolist(), strict=True)}
    kept = [e for e in entries.values() if e.p or e.q or e.r or e.id == sampled]  # a warped row pads its top with 0
    kept.sort(key=lambda e: (-e.r, -e.p, e.id))
    other, norm = (sum(host[name].tolist()) for name in ("residual_other", "residual_norm"))
    return ResidualView(tuple(kept), max(0.0, other), norm)


def residual_detail(p_row: Tensor, q_row: Tensor | None, x: int, residual: Tensor,
                    sampled: int) -> tuple[tuple[ResidualEntry, ...], float, float]:
    """`residual_reads` read back on its own: the entries (largest r first), the residual mass outside them
    and sum_v max(0, p_v - q_v) before normalising."""
    device = p_row.device
    view = residual_view(fetch(residual_reads(p_row, q_row, torch.tensor([x], device=device), residual,
                                              torch.tensor([sampled], device=device))))
    return view.entries, view.other, view.norm


# ---- tokens --------------------------------------------------------------------------------------


def token_texts(detok: StreamDetokenizer, block: VerifiedBlock, commit: Commit) -> tuple[list[str], str | None]:
    """The text of every draft and of the appended token; advances `detok` over the committed tokens.

    Committed tokens are decoded once, as the stream advances; rejected drafts are decoded in the same call,
    after the drafts kept before them.
    """
    draft_ids = block.draft_ids
    committed, peeked = detok.commit_block(commit.ids(block), commit.kept, draft_ids[commit.kept:])
    appended = committed[-1] if commit.next_token is not None else None
    return committed[: commit.kept] + peeked, appended


def outcome(i: int, kept: int, verdict: Verdict) -> Outcome:
    if i < kept:
        return ASD_EXCEPTION if verdict.is_exception(i) else ACCEPTED
    return CLIPPED if i < verdict.n_accepted else REJECTED


def _optional(values: Tensor | list[float] | None, n: int) -> list:
    if values is None:
        return [None] * n
    return values if isinstance(values, list) else values.tolist()


def drafted_tokens(block: VerifiedBlock, commit: Commit, texts: list[str]) -> tuple[DraftedToken, ...]:
    verdict, seen = block.verdict, block.seen
    n = len(block.draft_ids)
    target_ids = verdict.target_ids.tolist()
    q_x, regret, accept_prob, u = (_optional(v, n) for v in (seen.q_x, verdict.regret, verdict.accept_prob,
                                                              verdict.u))
    return tuple(
        DraftedToken(id=x_i, text=texts[i], q=q_x[i], p=seen.p_x[i], target_id=target_ids[i], regret=regret[i],
                     outcome=outcome(i, commit.kept, verdict), accept_prob=accept_prob[i], u=u[i])
        for i, x_i in enumerate(block.draft_ids)
    )


def appended_token(block: VerifiedBlock, commit: Commit, text: str | None) -> AppendedToken | None:
    """The target token after the kept drafts: plain step, bonus (all accepted) or correction."""
    if commit.next_token is None:
        return None
    n, a = len(block.draft_ids), block.verdict.n_accepted
    kind = TARGET if n == 0 else (BONUS if a == n else RESAMPLED)
    return AppendedToken(commit.next_token, text or "", kind, block.seen.p_appended[a])


# ---- token trees ---------------------------------------------------------------------------------


def main_line(tree: TreeDraft, verdict: TreeVerdict) -> list[int]:
    """The nodes a chain view shows: the accepted path, then the first child tried and rejected at its end."""
    end = verdict.path[-1] if verdict.path else ROOT
    rejected = next((c for c in tree.children(end) if c in verdict.tried), None)
    return list(verdict.path) + ([rejected] if rejected is not None else [])


def tree_reads(tree: TreeDraft, layout: TreeLayout, p: Tensor, target_ids: Tensor,
               inspect: bool = True) -> dict[str, Tensor]:
    """What a tree pass's event shows that no verdict decides, gathered where p lives, so that it is read back
    with the rule's argmax in one transfer: per row (n+1) the target's token and its p, per node (n) its p,
    its q and the target's token at its parent; with `inspect` the top of p per row and of q per node.

    p (n+1, V): the rows of the root and the nodes; target_ids (n+1,) long and `layout` on p's device.
    """
    parent_rows, tokens = layout.parent_rows, layout.tokens  # (n,) each
    reads = {"target_ids": target_ids, "row_p_target": _at(p, target_ids), "node_p": p[parent_rows, tokens],
             "node_targets": target_ids[parent_rows]}
    if tree.q is not None:
        reads["node_q"] = _at(tree.q, tokens.to(tree.q.device))
    if inspect:
        tops = batched_tops({"p_top": p} | ({} if tree.q is None else {"q_top": tree.q}))
        reads |= _top_reads(tops)
    return reads


def tree_end_reads(tree: TreeDraft, layout: TreeLayout, end: TreeEnd | None, p: Tensor,
                   inspect: bool = True) -> dict[str, Tensor]:
    """What the event shows about the end of a sampled walk (none under greedy), gathered on the device before
    the pass's one read: p of the appended token, and with `inspect` the residual at the end's first child
    (read whatever the walk did; shown only when the walk ended in a rejection)."""
    if end is None:
        return {}
    p_row = p.index_select(0, end.row)[0]  # (V,)
    reads = {"p_next": p_row.index_select(0, end.next_token)}  # (1,)
    if inspect and len(tree):
        q_row = None if tree.q is None else tree.q.index_select(0, end.rejected.to(tree.q.device))[0]  # (V,)
        x = layout.tokens.index_select(0, end.rejected)  # (1,)
        reads |= residual_reads(p_row, q_row, x, end.residual, end.next_token)
    return reads


def tree_block(tree: TreeDraft, verdict: TreeVerdict, line: list[int], host: Mapping[str, Tensor]) -> VerifiedBlock:
    """The tree's verified main line as a chain block, so the chain's tokens, statistics and detail apply.

    `host`: the host copies of `tree_reads` and `tree_end_reads`.
    """
    rows = torch.tensor([0] + [row_of(node) for node in line])  # (K'+1,)
    nodes = torch.tensor(line, dtype=torch.long)  # (K',)
    p_appended = host["row_p_target"][rows]  # (K'+1,) p of the argmax: the appended token under greedy
    if "p_next" in host:
        p_appended = p_appended.index_fill(0, torch.tensor([verdict.n_accepted]), float(host["p_next"][0]))
    seen = {"p_x": host["node_p"][nodes], "p_appended": p_appended}
    if "node_q" in host:
        seen["q_x"] = host["node_q"][nodes]
    for name, index in (("p_top", rows), ("q_top", nodes)):
        if f"{name}_ids" in host:
            seen |= {f"{name}_ids": host[f"{name}_ids"][index], f"{name}_values": host[f"{name}_values"][index]}
    seen |= {name: value for name, value in host.items() if name.startswith("residual_")}
    accept_prob = u = None
    if verdict.accept_prob is not None and verdict.u is not None:
        accept_prob = torch.tensor([verdict.accept_prob[node] for node in line])
        u = torch.tensor([verdict.u[node] for node in line])
    chain_verdict = Verdict(n_accepted=verdict.n_accepted, next_token=verdict.next_token,
                            target_ids=host["target_ids"][rows], accept_prob=accept_prob, u=u,
                            residual=verdict.residual)
    return VerifiedBlock(tree.tokens[nodes], chain_verdict, inspection(seen, verdict.residual is not None))


def tree_nodes(detok: StreamDetokenizer, tree: TreeDraft, verdict: TreeVerdict, host: Mapping[str, Tensor],
               kept: int) -> tuple[TreeNode, ...]:
    """Every node as plain data from the host copies of `tree_reads`; call before the pass commits (texts are
    peeked after the committed stream).

    `kept` of the path's nodes were committed; the rest of the path was accepted but clipped (EOS, token limit).
    """
    tokens, parents, depths = tree.tokens.tolist(), tree.parents.tolist(), tree.depths
    texts = detok.peek_tree(tokens, parents)
    p_x, target_at_parent = host["node_p"].tolist(), host["node_targets"].tolist()
    q_x = host["node_q"].tolist() if "node_q" in host else [None] * len(tokens)
    path = verdict.path
    accept_prob = verdict.accept_prob or {}

    def fate(node: int) -> NodeOutcome:
        if node in path:
            return "accepted" if path.index(node) < kept else "clipped"
        return "rejected" if node in verdict.tried else NOT_REACHED

    return tuple(TreeNode(id=i, token=tokens[i], text=texts[i], parent=parents[i], depth=depths[i], q=q_x[i],
                          p=p_x[i], target_id=target_at_parent[i], outcome=fate(i), accept_prob=accept_prob.get(i))
                 for i in range(len(tokens)))


# ---- inspector detail ----------------------------------------------------------------------------


def pass_detail(block: VerifiedBlock, commit: Commit, asd: AsdBlockStart | None) -> PassDetail:
    """The top of p and q per row, the residual at a sampled rejection, and the ASD state of the block.

    The residual is shown only when the pass appended the token drawn from it: not when the block was
    clipped before the rejected row (an accepted EOS, the token limit).
    """
    seen, verdict = block.seen, block.verdict
    shown = seen.residual if verdict.residual is not None and commit.kept == verdict.n_accepted \
        and commit.next_token is not None else None
    return PassDetail(
        p_top=seen.p_top, q_top=seen.q_top, asd_remaining=None if asd is None else asd.remaining,
        residual=() if shown is None else shown.entries, residual_other=0.0 if shown is None else shown.other,
        residual_norm=None if shown is None else shown.norm,
        asd_gate=None if asd is None else asd.settings.gate, asd_cap=None if asd is None else asd.settings.cap,
    )


# ---- timing --------------------------------------------------------------------------------------


def _recorded(device: torch.device) -> torch.cuda.Event:
    """A timing event recorded now in the device's queue."""
    event = torch.cuda.Event(enable_timing=True)
    event.record(torch.cuda.current_stream(device))
    return event


class PassClock:
    """Wall-clock marks of one pass: start, drafted, verified, done.

    On a CUDA device the drafted and verified marks are events recorded in its queue, so marking waits for
    nothing: an event completes once the work queued before it has run, at the time a clock read after
    synchronising would show. They are read when the clock stops, after the pass's one read has waited for
    the work queued before it, so reading them waits for nothing either. Elsewhere every mark synchronises
    the device (a no-op on the CPU) and reads the clock.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.start = time.perf_counter()
        self.drafted = self.verified = self.start
        self._events = [_recorded(device)] if device.type == "cuda" else None  # start, drafted, verified
        self._synchronized = device.type != "cpu"

    def _now(self) -> float:
        if self._synchronized:
            synchronize(self.device)
        return time.perf_counter()

    def mark_drafted(self) -> None:
        if self._events is not None:
            self._events.append(_recorded(self.device))
        else:
            self.drafted = self._now()

    def mark_verified(self) -> None:
        if self._events is not None:
            self._events.append(_recorded(self.device))
        else:
            self.verified = self._now()

    def timing(self, prompt_tokens: int = 0) -> Timing:
        """Stop the clock after the pass's read: draft, verify and whole-pass times in ms (`prompt_tokens`: see
        `Timing`)."""
        if self._events is None:
            done = self._now()
            return Timing(draft_ms=1e3 * (self.drafted - self.start), verify_ms=1e3 * (self.verified - self.drafted),
                          total_ms=1e3 * (done - self.start), prompt_tokens=prompt_tokens)
        done = time.perf_counter()
        started, drafted, verified = self._events  # complete: the pass's read waited for the work before them
        return Timing(draft_ms=started.elapsed_time(drafted), verify_ms=drafted.elapsed_time(verified),
                      total_ms=1e3 * (done - self.start), prompt_tokens=prompt_tokens)


class Stopwatch:
    """Times pieces of device work without making the host wait: on a CUDA device a pair of events per piece,
    read later, once a read has waited for the work queued before them (`samples_ms`); elsewhere the clock
    around each piece, after synchronising (a no-op on the CPU)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._samples: list[float] = []
        self._started: float | torch.cuda.Event = 0.0

    def start(self) -> None:
        if self.device.type == "cuda":
            self._started = _recorded(self.device)
        else:
            synchronize(self.device)
            self._started = time.perf_counter()

    def stop(self) -> None:
        started = self._started
        if isinstance(started, float):
            synchronize(self.device)
            self._samples.append(1e3 * (time.perf_counter() - started))
        else:
            self._pairs.append((started, _recorded(self.device)))

    def samples_ms(self) -> list[float]:
        """Every piece's time in ms; on a CUDA device call it after a read of later work (the pass's read)."""
        return self._samples + [begin.elapsed_time(end) for begin, end in self._pairs]
