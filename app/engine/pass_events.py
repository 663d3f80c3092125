"""One verified block as plain data: the drafted and appended tokens of a `PassEvent` and its inspector detail.

Notation (verify.py): drafts `x` (K',), the target's probabilities `p`
(K'+1, V) (warped under sampling, a plain softmax otherwise), the drafter's
`q` (K', V) or None for a deterministic drafter (one-hot q). The rule accepted
`a` drafts; clipping at EOS or the token limit kept `a' <= a` of them; the pass
then appends one target token unless the block ended the generation.

Nothing here touches a model or a cache: these are pure functions of the
tensors the pass produced, so what the window shows is what the engine decided.
`PassClock` takes the pass's timings, synchronising the device before each reading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import Tensor

from app.engine.detok import StreamDetokenizer
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
from app.engine.exact import to_host_float64
from app.engine.loading import synchronize
from app.engine.settings import AsdSettings
from app.engine.tree import ROOT, TreeDraft, TreeVerdict, row_of
from app.engine.verify import Verdict

INSPECT_TOP = 8  # entries of p, q and the residual kept per row for the pass inspector


@dataclass(frozen=True, eq=False)
class VerifiedBlock:
    """What the target verified and what the rule decided."""

    drafts: Tensor  # (K',) long on CPU: x
    q: Tensor | None  # (K', V) drafter probabilities; None = one-hot q
    p: Tensor  # (K'+1, V) target probabilities
    verdict: Verdict

    @property
    def draft_ids(self) -> list[int]:
        return self.drafts.tolist()


@dataclass(frozen=True)
class Commit:
    """What the pass commits: the first `kept` drafts, then `next_token` unless the block ended the generation."""

    kept: int  # a' <= a
    next_token: int | None

    def ids(self, block: VerifiedBlock) -> list[int]:
        return block.draft_ids[: self.kept] + ([self.next_token] if self.next_token is not None else [])


@dataclass(frozen=True)
class AsdBlockStart:
    """The ASD ledger and knobs in force when the block was verified."""

    remaining: float  # rem = B - s at block start
    settings: AsdSettings


# ---- tokens --------------------------------------------------------------------------------------


def token_texts(detok: StreamDetokenizer, block: VerifiedBlock, commit: Commit) -> tuple[list[str], str | None]:
    """The text of every draft and of the appended token; advances `detok` over the committed tokens.

    Committed tokens are decoded once, as the stream advances; rejected drafts need their own decode.
    """
    draft_ids = block.draft_ids
    peeked = detok.peek(draft_ids) if commit.kept < len(draft_ids) else []
    committed = detok.commit(commit.ids(block))
    appended = committed[-1] if commit.next_token is not None else None
    return committed[: commit.kept] + peeked[commit.kept:], appended


def outcome(i: int, kept: int, verdict: Verdict) -> Outcome:
    if i < kept:
        return ASD_EXCEPTION if verdict.is_exception(i) else ACCEPTED
    return CLIPPED if i < verdict.n_accepted else REJECTED


def _optional(values: Tensor | None, n: int) -> list:
    return [None] * n if values is None else values.tolist()


def drafted_tokens(block: VerifiedBlock, commit: Commit, texts: list[str]) -> tuple[DraftedToken, ...]:
    x, p, q, verdict = block.drafts, block.p, block.q, block.verdict
    n = x.numel()
    rows = torch.arange(n, device=p.device)
    p_x = p[rows, x.to(p.device)].tolist() if n else []  # (K',)
    q_x = _optional(None if q is None else q[rows.to(q.device), x.to(q.device)], n)  # (K',)
    target_ids = verdict.target_ids.tolist()
    regret, accept_prob, u = (_optional(v, n) for v in (verdict.regret, verdict.accept_prob, verdict.u))
    return tuple(
        DraftedToken(id=x_i, text=texts[i], q=q_x[i], p=p_x[i], target_id=target_ids[i], regret=regret[i],
                     outcome=outcome(i, commit.kept, verdict), accept_prob=accept_prob[i], u=u[i])
        for i, x_i in enumerate(block.draft_ids)
    )


def appended_token(block: VerifiedBlock, commit: Commit, text: str | None) -> AppendedToken | None:
    """The target token after the kept drafts: plain step, bonus (all accepted) or correction."""
    if commit.next_token is None:
        return None
    n, a = block.drafts.numel(), block.verdict.n_accepted
    kind = TARGET if n == 0 else (BONUS if a == n else RESAMPLED)
    return AppendedToken(commit.next_token, text or "", kind, float(block.p[a, commit.next_token]))


# ---- token trees ---------------------------------------------------------------------------------


def main_line(tree: TreeDraft, verdict: TreeVerdict) -> list[int]:
    """The nodes a chain view shows: the accepted path, then the first child tried and rejected at its end."""
    end = verdict.path[-1] if verdict.path else ROOT
    rejected = next((c for c in tree.children(end) if c in verdict.tried), None)
    return list(verdict.path) + ([rejected] if rejected is not None else [])


def tree_block(tree: TreeDraft, verdict: TreeVerdict, p: Tensor) -> VerifiedBlock:
    """The tree's verified main line as a chain block, so the chain's tokens, statistics and detail apply.

    p (n+1, V): the rows of the root and the nodes; the block's rows are those of the root and the main line.
    """
    line = main_line(tree, verdict)
    rows = torch.tensor([0] + [row_of(node) for node in line], device=p.device)  # (K'+1,)
    line_t = torch.tensor(line, dtype=torch.long)
    accept_prob = u = None
    if verdict.accept_prob is not None and verdict.u is not None:
        accept_prob = torch.tensor([verdict.accept_prob[node] for node in line])
        u = torch.tensor([verdict.u[node] for node in line])
    chain_verdict = Verdict(n_accepted=verdict.n_accepted, next_token=verdict.next_token,
                            target_ids=verdict.target_ids[rows], accept_prob=accept_prob, u=u,
                            residual=verdict.residual)
    q = None if tree.q is None else tree.q[line_t.to(tree.q.device)]
    return VerifiedBlock(tree.tokens[line_t], q, p[rows], chain_verdict)


def tree_nodes(detok: StreamDetokenizer, tree: TreeDraft, verdict: TreeVerdict, p: Tensor,
               kept: int) -> tuple[TreeNode, ...]:
    """Every node as plain data; call before the pass commits (texts are peeked after the committed stream).

    `kept` of the path's nodes were committed; the rest of the path was accepted but clipped (EOS, token limit).
    """
    tokens, parents, depths = tree.tokens.tolist(), tree.parents.tolist(), tree.depths
    texts = detok.peek_tree(tokens, parents)
    parent_rows = torch.tensor([row_of(parent) for parent in parents], dtype=torch.long, device=p.device)  # (n,)
    p_x = p[parent_rows, tree.tokens.to(p.device)].tolist()  # (n,)
    q_x = [None] * len(tokens) if tree.q is None else \
        tree.q[torch.arange(len(tokens), device=tree.q.device), tree.tokens.to(tree.q.device)].tolist()
    target_at_parent = verdict.target_ids[parent_rows.to(verdict.target_ids.device)].tolist()
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


def top_rows(probs: Tensor) -> tuple[tuple[TokenProb, ...], ...]:
    """(R, V) -> R rows of the INSPECT_TOP most probable tokens."""
    values, indices = probs.topk(min(INSPECT_TOP, probs.shape[-1]), dim=-1)
    return tuple(tuple(TokenProb(i, v) for i, v in zip(row_i, row_v, strict=True))
                 for row_i, row_v in zip(indices.tolist(), values.tolist(), strict=True))


def residual_detail(p_row: Tensor, q_row: Tensor | None, x: int, residual: Tensor,
                    sampled: int) -> tuple[tuple[ResidualEntry, ...], float, float]:
    """The rejected row for the inspector: p, q, r on the union of the top tokens of each and the token
    sampled from r (drawn from anywhere in r, so it may lie outside every top).

    Returns the entries (largest r first), the residual mass outside them and
    sum_v max(0, p_v - q_v) before normalising. (V,) rows; one-hot q when q_row is None.
    """
    p_row, residual = to_host_float64(p_row), to_host_float64(residual)  # (V,) on the host
    if q_row is None:  # one-hot q at x
        q_row = torch.zeros(p_row.numel())  # (V,)
        q_row[x] = 1.0
    q_row = to_host_float64(q_row)  # (V,)
    k = min(INSPECT_TOP, p_row.numel())
    tops = [row.topk(k).indices for row in (p_row, q_row, residual)]
    ids = torch.cat([*tops, torch.tensor([sampled])]).unique()  # (<= 3 INSPECT_TOP + 1,)
    entries = [ResidualEntry(i, p, q, r) for i, p, q, r in
               zip(ids.tolist(), p_row[ids].tolist(), q_row[ids].tolist(), residual[ids].tolist(), strict=True)
               if p or q or r or i == sampled]  # a warped (sparse) row pads its top with zeros
    entries.sort(key=lambda e: (-e.r, -e.p, e.id))
    other = max(0.0, float(residual.sum() - residual[ids].sum()))
    norm = float((p_row - q_row).clamp(min=0.0).sum())
    return tuple(entries), other, norm


def pass_detail(block: VerifiedBlock, commit: Commit, asd: AsdBlockStart | None) -> PassDetail:
    """The top of p and q per row, the residual at a sampled rejection, and the ASD state of the block.

    The residual is shown only when the pass appended the token drawn from it: not when the block was
    clipped before the rejected row (an accepted EOS, the token limit).
    """
    residual: tuple[ResidualEntry, ...] = ()
    residual_other, residual_norm = 0.0, None
    verdict = block.verdict
    if verdict.residual is not None and commit.kept == verdict.n_accepted and commit.next_token is not None:
        n = verdict.n_accepted
        q_row = None if block.q is None else block.q[n]
        residual, residual_other, residual_norm = residual_detail(block.p[n], q_row, block.draft_ids[n],
                                                                  verdict.residual, commit.next_token)
    return PassDetail(
        p_top=top_rows(block.p), q_top=top_rows(block.q) if block.q is not None else (),
        asd_remaining=None if asd is None else asd.remaining,
        residual=residual, residual_other=residual_other, residual_norm=residual_norm,
        asd_gate=None if asd is None else asd.settings.gate, asd_cap=None if asd is None else asd.settings.cap,
    )


# ---- timing --------------------------------------------------------------------------------------


class PassClock:
    """Wall-clock marks of one pass: start, drafted, verified, done; the device is synchronised before each mark."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.start = time.perf_counter()
        self.drafted = self.verified = self.start

    def _now(self) -> float:
        synchronize(self.device)
        return time.perf_counter()

    def mark_drafted(self) -> None:
        self.drafted = self._now()

    def mark_verified(self) -> None:
        self.verified = self._now()

    def timing(self) -> Timing:
        """Stop the clock: draft, verify and whole-pass times in ms."""
        done = self._now()
        return Timing(draft_ms=1e3 * (self.drafted - self.start), verify_ms=1e3 * (self.verified - self.drafted),
                      total_ms=1e3 * (done - self.start))
