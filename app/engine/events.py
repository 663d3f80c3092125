"""Events the engine yields: frozen dataclasses of plain Python data.

One generation yields `StartEvent`, then one `PassEvent` per verification
pass (and `NoticeEvent`s, e.g. when a drafter failed and was skipped), then
exactly one `EndEvent`. Events never hold tensors and are never mutated, so
the window may keep them and another thread may read them.

Notation as in docs/ALGORITHMS.md §1: `p` is the target's probability of a token,
`q` the drafter's (None for deterministic drafters, which use a one-hot q).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Literal

from app.engine.settings import VerifyRule

# Outcome of one drafted token.
Outcome = Literal["accepted", "rejected", "asd_exception", "clipped"]
ACCEPTED: Outcome = "accepted"
REJECTED: Outcome = "rejected"  # drafted, then discarded by the verifier
ASD_EXCEPTION: Outcome = "asd_exception"  # a mismatch accepted by ASD within its budget
CLIPPED: Outcome = "clipped"  # accepted by the verifier but past EOS or max new tokens

# Kind of the one target token a pass appends.
AppendedKind = Literal["resampled", "bonus", "target"]
RESAMPLED: AppendedKind = "resampled"  # correction (greedy argmax) or residual sample at the first rejection
BONUS: AppendedKind = "bonus"  # every draft accepted: sampled from the row after the block
TARGET: AppendedKind = "target"  # nothing was drafted: plain autoregressive step

# What happened to one node of a token tree (docs/ALGORITHMS.md §9).
NodeOutcome = Literal["accepted", "rejected", "not_reached", "clipped"]
NOT_REACHED: NodeOutcome = "not_reached"  # its parent was not accepted, or a sibling tried before it was

EndReason = Literal["eos", "max_tokens", "context_full", "stopped", "error"]
NoticeLevel = Literal["warning", "info"]


@dataclass(frozen=True)
class TokenProb:
    id: int
    prob: float


@dataclass(frozen=True)
class DraftedToken:
    id: int
    text: str
    q: float | None  # drafter probability; None for deterministic drafters
    p: float  # target probability after warping (greedy: softmax of raw logits)
    target_id: int  # the target's argmax at this position
    regret: float | None  # ASD regret top - z[x]; None outside ASD
    outcome: Outcome
    accept_prob: float | None = None  # min(1, p/q) under sampling
    u: float | None = None  # the uniform draw compared with accept_prob


@dataclass(frozen=True)
class TreeNode:
    """One node of a pass's token tree; nodes are listed parents first, siblings in the order they were tried."""

    id: int  # index in the pass's tree
    token: int
    text: str  # what the token adds after its path (peeked: it may never be committed)
    parent: int  # -1: a child of the last committed token
    depth: int  # 1 for a child of the last committed token
    q: float | None  # the drafter's probability of the token (None for deterministic drafters)
    p: float  # the target's probability of the token after its parent (warped under sampling)
    target_id: int  # the target's argmax after its parent
    outcome: NodeOutcome
    accept_prob: float | None = None  # sampling: the chance it was accepted with, if it was tried


@dataclass(frozen=True)
class AppendedToken:
    id: int
    text: str
    kind: AppendedKind
    p: float


@dataclass(frozen=True)
class Ledger:
    spent: float  # ASD regret spent so far in this request
    budget: float  # B (0 outside ASD)
    exceptions: int = 0  # ASD exceptions so far in this request


@dataclass(frozen=True)
class Timing:
    draft_ms: float
    verify_ms: float
    total_ms: float  # wall time of the whole pass, engine bookkeeping included
    # Committed tokens the verification forward also read: the prompt, in a request's first pass on a cold cache
    # (its verify time is then no sample of one forward of its own rows).
    prompt_tokens: int = 0


@dataclass(frozen=True)
class RunningStats:
    """Cumulative figures of a request, computed by `app/engine/core/stats.py` (docs/ALGORITHMS.md §7)."""

    alpha: float | None  # accepted / (accepted + passes that ended in a rejection): the α of E(α, K)
    tokens_per_pass: float
    c: float | None  # draft time per drafted token over the time of one target forward of one token
    tokens_per_s: float
    acceptance_rate: float | None = None  # accepted / drafted, clipped drafts excluded
    expected_tokens_per_pass: float | None = None  # E(alpha, K) averaged over the passes' own K
    verify_cost: float | None = None  # mean verification forward over one target forward of one token
    estimated_speedup: float | None = None  # tokens x (one target forward) / time: an estimate, not a race
    target_forward_ms: float | None = None  # t_T: the median one-token target forward of the run


@dataclass(frozen=True)
class ResidualEntry:
    """One token of the rejected row n: p_n, q_n (one-hot q: 1 at the draft, else 0) and r = norm(max(0, p_n - q_n))."""

    id: int
    p: float
    q: float
    r: float


@dataclass(frozen=True)
class PassDetail:
    """What the pass inspector shows: the top of each distribution."""

    p_top: tuple[tuple[TokenProb, ...], ...]  # K+1 rows
    q_top: tuple[tuple[TokenProb, ...], ...]  # K rows, empty when q is one-hot
    asd_remaining: float | None  # B - s read at block start
    # At the first rejection under sampling: p, q and r on the union of the top tokens of p_n, q_n and r
    # (at most 3 x 8 entries, so events stay small), the residual mass outside those tokens (the
    # "other tokens" bar: entries + other = 1), and sum_v max(0, p_v - q_v) before normalising
    # (= 1 - sum_v min(p_v, q_v): the chance that a draft sampled from q is rejected at this row).
    residual: tuple[ResidualEntry, ...] = ()
    residual_other: float = 0.0
    residual_norm: float | None = None
    asd_gate: float | None = None  # g in force for this pass (ASD only)
    asd_cap: int | None = None  # M in force for this pass (ASD only)


@dataclass(frozen=True)
class ExecutionMode:
    """How the target runs (runtime/execution.py): its KV cache and whether its short forwards are compiled."""

    cache: str = "dynamic"  # dynamic | static
    compiled: bool = False


@dataclass(frozen=True)
class StartEvent:
    target: str
    draft_model: str | None
    device: str
    dtype: str
    settings: dict
    prompt_ids: tuple[int, ...]
    prompt_text: str
    execution: ExecutionMode = ExecutionMode()
    type: str = "start"


@dataclass(frozen=True)
class PassEvent:
    index: int
    drafter: str | None  # name of the drafter that proposed, None if nothing was drafted
    k: int  # K' allowed for this pass: the K in force, clipped by the token limit and the context
    verify: VerifyRule
    drafted: tuple[DraftedToken, ...]
    appended: AppendedToken | None  # None when the pass ended the generation inside the block
    ledger: Ledger
    timing: Timing
    position: int  # generated tokens before this pass
    stats: RunningStats
    detail: PassDetail | None = None
    k_setting: int | None = None  # the K the run is set to (the control's value; adaptive K moves from it)
    asd_reused: int | None = None  # ASD: matches kept after the first kept exception (§5.6); None outside ASD
    asd_saved: int | None = None  # ASD: drafts kept beyond strict greedy on the same logits (§5.6); None outside
    # Token trees (§9): every node of the pass's tree and the accepted path (node ids, root's child first);
    # None for a chain. `drafted` then holds the path and the first rejected child at its end, as a chain would.
    tree: tuple[TreeNode, ...] | None = None
    path: tuple[int, ...] | None = None
    type: str = "pass"

    @property
    def committed_ids(self) -> tuple[int, ...]:
        kept = [t.id for t in self.drafted if t.outcome in (ACCEPTED, ASD_EXCEPTION)]
        return tuple(kept) + ((self.appended.id,) if self.appended else ())

    @property
    def n_accepted(self) -> int:
        return sum(t.outcome in (ACCEPTED, ASD_EXCEPTION) for t in self.drafted)


@dataclass(frozen=True)
class NoticeEvent:
    level: NoticeLevel
    message: str
    type: str = "notice"


@dataclass(frozen=True)
class AsdSummary:
    """What ASD bought and spent over one request (docs/ALGORITHMS.md §5.6).

    `saved` = sum over passes of a' - a_strict (kept drafts beyond strict greedy on the same logits);
    `passes_saved` = passes * saved / (tokens - saved): the passes strict greedy would have needed for the
    request's tokens at the tokens per pass it would have had on the same passes, minus the passes taken.
    """

    exceptions: int  # accepted mismatches kept
    spent: float  # regret spent, s
    budget: float  # B (inf = unbounded)
    remaining: float  # B - s (inf when B is unbounded)
    reused: int  # matches kept after an exception: the realised-prefix suffix reuse
    saved: int  # tokens kept beyond strict greedy on the same logits (= exceptions + reused)
    passes_saved: float  # against strict greedy at its tokens per pass on the same passes


@dataclass(frozen=True)
class EndEvent:
    reason: EndReason
    token_ids: tuple[int, ...]
    text: str
    passes: int
    elapsed_s: float
    stats: RunningStats
    error: str | None = None
    error_type: str | None = None
    asd: AsdSummary | None = None  # ASD only: exceptions, regret, reuse and passes saved of the request
    type: str = "end"


Event = StartEvent | PassEvent | NoticeEvent | EndEvent


def to_json_dict(event: Event) -> dict:
    return dataclasses.asdict(event)


def to_json_line(event: Event, ensure_ascii: bool = False) -> str:
    """One strict JSON object: a NaN or infinity (a model gone numerically wrong) is written as null."""
    data = to_json_dict(event)
    try:
        return json.dumps(data, ensure_ascii=ensure_ascii, allow_nan=False)
    except ValueError:  # rare, so the common case pays no extra walk over the event
        return json.dumps(_finite_or_none(data), ensure_ascii=ensure_ascii, allow_nan=False)


def _finite_or_none(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_none(item) for item in value]
    return value
