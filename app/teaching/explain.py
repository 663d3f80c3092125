"""What happened in one pass, rebuilt from the numbers of its `PassEvent` alone (no Qt, no model).

`inspect_pass` turns an event into per-position rows (the pass inspector's
table) and `explain_pass` into a plain-language paragraph. Nothing here
re-runs the model: every figure is either stored in the event or a direct
function of stored figures, so what the inspector shows is what the engine
decided.

Notation (docs/ALGORITHMS.md §1, §4.2, §5): draft `x_i` at position i (0-based) of a block of
K' drafted tokens; `p`, `q` the target's and drafter's probabilities of
`x_i` (a deterministic drafter has a one-hot q, so q(x_i) = 1); under
sampling the draft is kept iff u_i <= min(1, p/q). Under ASD: regret r_i,
suffix value v_i = K' - i, gate r_i / v_i <= g, block cap on the mismatches
so far <= M, cumulative charged regret C_i <= rem = B - s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.engine.events import (
    ACCEPTED,
    ASD_EXCEPTION,
    BONUS,
    CLIPPED,
    NOT_REACHED,
    REJECTED,
    TARGET,
    DraftedToken,
    PassEvent,
    ResidualEntry,
    TreeNode,
)

TokenText = Callable[[int], str]

# Verdict labels shown per drafted position.
KEPT = "accepted"
EXCEPTION = "ASD exception"
REUSED = "reused (greedy after an exception)"  # a match kept after the block's first ASD exception (§5.6)
REJECTED_HERE = "rejected"
DISCARDED = "discarded (after a rejection)"
CLIPPED_HERE = "dropped (generation ended)"


def _default_text(token_id: int) -> str:
    return f"#{token_id}"


@dataclass(frozen=True)
class AsdCheck:
    """The three ASD conditions at one position, as `verify_asd` evaluates them."""

    regret: float  # r_i
    suffix_value: int  # v_i = K' - i
    gate_ratio: float  # r_i / v_i
    gate: float  # g
    mismatch: bool  # x_i differs from the target's argmax
    block_mismatches: int  # mismatches in positions 0..i
    cap: int  # M
    cost_before: float  # C_{i-1}
    cost: float  # C_i
    remaining: float  # rem = B - s at block start

    @property
    def gate_ok(self) -> bool:
        return self.gate > 0 and self.gate_ratio <= self.gate

    @property
    def cap_ok(self) -> bool:
        return self.block_mismatches <= self.cap

    @property
    def affordable(self) -> bool:
        return self.cost_before < self.remaining and self.cost <= self.remaining

    @property
    def feasible(self) -> bool:
        return not self.mismatch or (self.gate_ok and self.cap_ok and self.affordable)

    def failed_condition(self) -> str | None:
        """The first ASD condition this mismatch fails, in words; None if it passes them all."""
        if not self.mismatch:
            return None
        if not self.gate_ok:
            if self.gate <= 0:
                return "the gate: g = 0 accepts no mismatch"
            ratio = f"{self.regret:.3g}/{self.suffix_value} = {self.gate_ratio:.3g}"
            return f"the gate: r/v = {ratio} > g = {self.gate:.3g}"
        if not self.cap_ok:
            return f"the block cap: it would be mismatch {self.block_mismatches} of at most M = {self.cap}"
        if not self.affordable:
            return (f"the budget: the block's regret would reach C = {self.cost:.3g} "
                    f"but only {self.remaining:.3g} of B was left")
        return None


@dataclass(frozen=True)
class PositionView:
    """One drafted position as the inspector shows it."""

    index: int  # i, 0-based
    token: DraftedToken
    q_effective: float  # q(x_i); 1 for a deterministic (one-hot) drafter
    ratio: float | None  # p(x)/q(x); None when q(x) = 0
    verdict: str
    asd: AsdCheck | None

    @property
    def accept_prob(self) -> float | None:
        return self.token.accept_prob

    @property
    def u(self) -> float | None:
        return self.token.u


@dataclass(frozen=True)
class LedgerView:
    """The ASD request ledger around this pass."""

    before: float  # s at block start = B - rem
    after: float  # s after charging this block
    budget: float  # B
    exceptions_before: int
    exceptions_after: int

    @property
    def remaining_before(self) -> float:
        return self.budget - self.before


@dataclass(frozen=True)
class PassInspection:
    event: PassEvent
    positions: tuple[PositionView, ...]
    first_rejection: int | None  # position of the first rejected draft
    ledger: LedgerView | None  # ASD only

    @property
    def committed(self) -> int:
        return len(self.event.committed_ids)


# ---------------------------------------------------------------- inspection


def inspect_pass(event: PassEvent) -> PassInspection:
    first = next((i for i, t in enumerate(event.drafted) if t.outcome == REJECTED), None)
    exception = next((i for i, t in enumerate(event.drafted) if t.outcome == ASD_EXCEPTION), None)
    asd = _asd_state(event)
    checks: list[AsdCheck | None] = [None] * len(event.drafted) if asd is None else list(_asd_checks(event, asd))
    positions = tuple(_position(event, i, token, first, checks[i], exception is not None and i > exception)
                      for i, token in enumerate(event.drafted))
    return PassInspection(event, positions, first, _ledger(event, asd) if asd is not None else None)


def _position(event: PassEvent, i: int, token: DraftedToken, first: int | None, asd: AsdCheck | None,
              after_exception: bool = False) -> PositionView:
    q = 1.0 if token.q is None else token.q
    ratio = token.p / q if q > 0 else None
    return PositionView(i, token, q, ratio, _verdict(token, i, first, after_exception), asd)


def _verdict(token: DraftedToken, i: int, first: int | None, after_exception: bool = False) -> str:
    if token.outcome == ACCEPTED:
        return REUSED if after_exception else KEPT
    if token.outcome == ASD_EXCEPTION:
        return EXCEPTION
    if token.outcome == CLIPPED:
        return CLIPPED_HERE
    return REJECTED_HERE if i == first else DISCARDED


@dataclass(frozen=True)
class _AsdState:
    remaining: float  # rem = B - s at block start
    gate: float  # g
    cap: int  # M


def _asd_state(event: PassEvent) -> _AsdState | None:
    """What an ASD pass's detail records of the block start (rem, g, M); None for other rules."""
    detail = event.detail
    if event.verify != "asd" or detail is None or detail.asd_remaining is None:
        return None
    if detail.asd_gate is None or detail.asd_cap is None:
        return None
    return _AsdState(detail.asd_remaining, detail.asd_gate, detail.asd_cap)


def _asd_checks(event: PassEvent, asd: _AsdState) -> list[AsdCheck]:
    gate, cap, remaining = asd.gate, asd.cap, asd.remaining
    k = len(event.drafted)
    checks, cost, mismatches = [], 0.0, 0
    for i, token in enumerate(event.drafted):
        regret = token.regret or 0.0
        mismatch = token.id != token.target_id
        cost_before = cost
        cost += regret if mismatch else 0.0
        mismatches += mismatch
        checks.append(AsdCheck(regret, k - i, regret / (k - i), gate, mismatch, mismatches, cap, cost_before, cost,
                               remaining))
    return checks


def _ledger(event: PassEvent, asd: _AsdState) -> LedgerView:
    new_exceptions = sum(t.outcome == ASD_EXCEPTION for t in event.drafted)
    budget = event.ledger.budget
    return LedgerView(before=budget - asd.remaining, after=event.ledger.spent, budget=budget,
                      exceptions_before=event.ledger.exceptions - new_exceptions,
                      exceptions_after=event.ledger.exceptions)


# ---------------------------------------------------------------- the residual at a rejection


@dataclass(frozen=True)
class ResidualBars:
    """The residual chart of a sampled rejection: the stored entries (the sampled token always among them)
    and `other`, the residual mass of every token not in `entries` (entries + other = 1)."""

    entries: tuple[ResidualEntry, ...]
    other: float
    sampled: int | None  # the replacement token's id


def residual_bars(event: PassEvent) -> ResidualBars | None:
    """The residual chart's bars, or None when the pass has no sampled rejection."""
    detail = event.detail
    if detail is None or not detail.residual:
        return None
    sampled = event.appended.id if event.appended is not None else None
    return ResidualBars(detail.residual, detail.residual_other, sampled)


# ---------------------------------------------------------------- plain language


def explain_pass(event: PassEvent, token_text: TokenText | None = None) -> str:
    """A paragraph a student can read: what was drafted, what the target decided, and why."""
    text = token_text or _default_text
    inspection = inspect_pass(event)
    sentences = [_opening(event)]
    if event.drafted:
        sentences += _agreement(inspection)
        sentences += _rejection(inspection, text)
        sentences += _asd_summary(inspection)
    sentences += _appended(event)
    sentences.append(_cost(event))
    return " ".join(s for s in sentences if s)


def _quote(s: str, token_id: int | None = None) -> str:
    """A token's text in quotes; an empty one (part of a multi-byte character) by its id."""
    if not s and token_id is not None:
        return f"token #{token_id}"
    return "“" + s.replace("\n", "↵") + "”"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _opening(event: PassEvent) -> str:
    if not event.drafted:
        return (f"In pass {event.index} nothing was drafted, so the target ran alone: "
                f"one forward pass for one token, exactly like plain decoding.")
    if event.tree:
        return _tree_opening(event)
    tokens = ", ".join(_quote(t.text, t.id) for t in event.drafted)
    proposed = _count(len(event.drafted), "token")
    return f"In pass {event.index} the {event.drafter} drafter proposed {proposed}: {tokens}."


def branch_count(tree: Sequence[TreeNode]) -> int:
    """Root-to-leaf branches of a tree: its nodes without children."""
    parents = {node.parent for node in tree}
    return sum(node.id not in parents for node in tree)


def tested_count(tree: Sequence[TreeNode]) -> int:
    """Nodes the target tried (accepted, rejected or clipped), as opposed to those it never reached."""
    return sum(node.outcome != NOT_REACHED for node in tree)


def _tree_opening(event: PassEvent) -> str:
    """A tree pass: its size, what the target tried, then the main line read like a chain."""
    tree = event.tree or ()
    leaves, tried = branch_count(tree), tested_count(tree)
    line = ", ".join(_quote(t.text, t.id) for t in event.drafted)
    branches = "1 branch" if leaves == 1 else f"{leaves} branches"
    return (f"In pass {event.index} the {event.drafter} drafter proposed a token tree of {_count(len(tree), 'node')} "
            f"on {branches}, all verified in the same single target forward; the target tried {tried} of them and "
            f"kept the longest path it accepted. Read as a chain (the accepted path, then the first child rejected "
            f"after it, if any): {line}.")


def _agreement(inspection: PassInspection) -> list[str]:
    event = inspection.event
    kept = event.n_accepted
    total = len(event.drafted)
    if inspection.first_rejection is None:
        if kept < total:
            return [f"The target accepted them, but the generation ended after {_count(kept, 'token')} of the block."]
        exceptions = sum(t.outcome == ASD_EXCEPTION for t in event.drafted)
        why = f" ({exceptions} of them as ASD exceptions, see below)" if exceptions else ""
        return [(f"The target accepted all {total}" if total > 1 else "The target accepted it") + why + "."]
    if kept == 0:
        return ["The target rejected the very first one."]
    first = "first" if kept == 1 else f"first {kept}"
    return [f"The target kept the {first} and rejected the rest."]


def _rejection(inspection: PassInspection, text: TokenText) -> list[str]:
    n = inspection.first_rejection
    if n is None:
        return []
    position = inspection.positions[n]
    token = position.token
    where = f"At position {n + 1} the drafter proposed {_quote(token.text, token.id)}"
    if inspection.event.verify == "sample":
        return [where + _sampling_reason(position), _residual_sentence(inspection)]
    wanted = _quote(text(token.target_id), token.target_id)
    if inspection.event.verify == "asd" and position.asd is not None and position.asd.mismatch:
        return [where + f" but the target's first choice was {wanted}; ASD refused it on "
                + (position.asd.failed_condition() or "its rules") + "."]
    return [where + f" but the target's most likely token (its argmax) was {wanted}, "
            "so that draft and every draft after it were thrown away."]


def _sampling_reason(position: PositionView) -> str:
    token = position.token
    q = "q = 1 (a deterministic drafter)" if token.q is None else f"q = {token.q:.3g}"
    accept = position.accept_prob if position.accept_prob is not None else min(1.0, position.ratio or 0.0)
    u = f"the uniform draw u = {position.u:.3g} was larger" if position.u is not None else "the draw said no"
    return (f": the target gave it p = {token.p:.3g} and the drafter {q}, so it could be kept with probability "
            f"min(1, p/q) = {accept:.3g}, but {u}, so it was rejected.")


def _residual_sentence(inspection: PassInspection) -> str:
    event = inspection.event
    detail = event.detail
    appended = event.appended
    if appended is None:
        return ""
    norm = "" if detail is None or detail.residual_norm is None else (
        f" (a draft from q is rejected at this position with probability {detail.residual_norm:.3g})")
    return ("The replacement was sampled from the residual norm(max(0, p − q)), which keeps only the tokens the "
            f"target likes more than the drafter did{norm}; it gave {_quote(appended.text, appended.id)}. "
            "This correction is what makes speculative sampling lossless.")


def _asd_summary(inspection: PassInspection) -> list[str]:
    ledger = inspection.ledger
    if ledger is None:
        return []
    sentences = []
    for position in inspection.positions:
        check = position.asd
        if position.token.outcome == ASD_EXCEPTION and check is not None:
            sentences.append(
                f"ASD accepted {_quote(position.token.text, position.token.id)} at position {position.index + 1} "
                f"although the target preferred another token: its regret {check.regret:.3g} over its suffix value v = "
                f"{check.suffix_value} is {check.gate_ratio:.3g} ≤ g = {check.gate:.3g}, it is mismatch "
                f"{check.block_mismatches} of at most M = {check.cap} in this block, and the block's regret "
                f"{check.cost:.3g} fits in the {check.remaining:.3g} left of B.")
    reused = sum(position.verdict == REUSED for position in inspection.positions)
    if reused:
        strict = inspection.event.n_accepted - (inspection.event.asd_saved or 0)
        sentences.append(
            f"The {_count(reused, 'draft')} after the first exception matched the target's choice at its row, "
            "which the verification forward computed with the exception already in the context: greedy decoding "
            "from the realised text would have chosen them too, so ASD reused them without another forward "
            f"(strict greedy would have kept {_count(strict, 'draft')} of this block).")
    if ledger.after != ledger.before or sentences:
        sentences.append(f"The regret ledger went from {ledger.before:.3g} to {ledger.after:.3g} of B = "
                         f"{ledger.budget:.3g} ({_count(ledger.exceptions_after, 'exception')} so far).")
    return sentences


def _appended(event: PassEvent) -> list[str]:
    appended = event.appended
    if appended is None:
        return ["The generation ended inside this block (end of text or the token limit), "
                "so no target token was added."]
    if appended.kind == BONUS:
        return [f"Because every draft survived, the target's row after the block gave a bonus token "
                f"{_quote(appended.text, appended.id)} for free."]
    if appended.kind == TARGET:
        return [f"It produced {_quote(appended.text, appended.id)}."]
    if event.verify != "sample":
        return [f"The target's own token {_quote(appended.text, appended.id)} was appended in its place."]
    return []


def _cost(event: PassEvent) -> str:
    committed = len(event.committed_ids)
    timing = event.timing
    prompt = f", which also read the prompt's {_count(timing.prompt_tokens, 'token')}" if timing.prompt_tokens else ""
    return (f"The pass committed {_count(committed, 'token')} for one target forward{prompt} "
            f"({timing.total_ms:.1f} ms: {timing.draft_ms:.1f} ms drafting, {timing.verify_ms:.1f} ms verifying).")
