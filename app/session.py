"""Qt-side view-model of one generation: the history the widgets render.

Events arrive (queued from the worker thread) one by one; the session files
them, updates per-pass series in growing NumPy arrays and marks itself
dirty. A ~30 Hz timer then emits `sig_refresh` once, and the widgets redraw
from the session's state — never once per token.

Every figure comes from `app/engine/core/stats.py` (docs/ALGORITHMS.md §7): the
cumulative ones are the engine's own (`event.stats`), the per-drafter, rolling
and per-position ones are computed here by the same classes. alpha = accepted /
(accepted + passes that ended in a rejection), the α of E(α, K); the acceptance
rate = accepted / drafted; c = draft time per drafted token over one target
forward of one token; K = drafts per pass. The theory of a tree pass is its
tree's expected tokens per pass under the rank-wise i.i.d. model (§9.4),
from the acceptance by sibling rank over the run's passes so far.
"""

from __future__ import annotations

import csv
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from app.engine.core.stats import (
    PositionAcceptance,
    RankAcceptance,
    RollingAcceptance,
    expected_tokens_per_pass,
    expected_tree_tokens,
    predicted_speedup,
    rank_paths,
    speedup_with_verify_cost,
)
from app.engine.events import (
    ACCEPTED,
    ASD_EXCEPTION,
    EndEvent,
    NoticeEvent,
    PassEvent,
    RunningStats,
    StartEvent,
    to_json_line,
)

REFRESH_MS = 33
ROLLING_PASSES = 16
NAN = math.nan

PASS_COLUMNS = (
    "pass", "k", "drafted", "accepted", "committed", "alpha_cum", "alpha_roll", "acceptance_rate",
    "expected_tokens", "ledger_spent", "budget", "exceptions", "draft_ms", "verify_ms", "total_ms", "prompt_tokens",
    "tokens_per_s", "c", "verify_cost", "speedup_estimated", "speedup_predicted", "speedup_predicted_verify",
)


class GrowingColumns:
    """Named float64 columns with amortised O(1) append; views are cheap slices."""

    def __init__(self, names: tuple[str, ...], capacity: int = 1024) -> None:
        self.names = names
        self._index = {name: i for i, name in enumerate(names)}
        self._data = np.full((len(names), capacity), NAN)
        self.size = 0

    def append(self, row: dict[str, float]) -> None:
        if self.size == self._data.shape[1]:
            grown = np.full((len(self.names), 2 * self.size), NAN)
            grown[:, : self.size] = self._data
            self._data = grown
        column = self._data[:, self.size]
        for name, value in row.items():
            column[self._index[name]] = NAN if value is None else value
        self.size += 1

    def __getitem__(self, name: str) -> np.ndarray:
        return self._data[self._index[name], : self.size]


@dataclass(frozen=True)
class SettingChange:
    """Where the drafter, K or verification rule changed mid-run (derived from two consecutive passes)."""

    row: int  # row in Session.passes of the first pass under the new setting
    index: int  # that pass's index
    text: str  # what changed, e.g. "K 4 → 6"


def setting_changes(before: PassEvent, after: PassEvent, known_drafters: set[str]) -> list[str]:
    """What changed from `before` to `after`. A drafter counts as a change only when it is neither in the
    chain the run started with nor proposed in the recent passes: a fallback chain hands over between its
    drafters pass by pass by design."""
    found = []
    if after.drafter is not None and after.drafter not in known_drafters:
        found.append(f"drafter → {after.drafter}")
    k_before, k_after = _k_set(before), _k_set(after)
    if k_before != k_after:
        found.append(f"K {k_before} → {k_after}")
    if before.verify != after.verify:
        found.append(f"{before.verify} → {after.verify}")
    return found


def _k_set(event: PassEvent) -> int:
    """The K the run was set to at this pass (K' is clipped by the token limit: not a change of setting)."""
    return event.k_setting if event.k_setting is not None else event.k


class DrafterSeries:
    """alpha of one drafter over the passes in which it proposed."""

    def __init__(self) -> None:
        self.columns = GrowingColumns(("pass", "alpha_roll", "alpha_cum"), capacity=256)
        self.acceptance = RollingAcceptance(ROLLING_PASSES)

    def add(self, event: PassEvent) -> None:
        self.acceptance.add(event.drafted)
        self.columns.append({"pass": event.index, "alpha_roll": self.acceptance.recent.alpha,
                             "alpha_cum": self.acceptance.total.alpha})


class Session(QObject):
    """History of the current run; widgets read it when `sig_refresh` fires."""

    sig_refresh = Signal()
    sig_begun = Signal()  # a new run's history begins: the previous one was just forgotten
    sig_started = Signal(object)  # StartEvent
    sig_ended = Signal(object)  # EndEvent
    sig_notice = Signal(object)  # NoticeEvent

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setInterval(REFRESH_MS)
        self._timer.timeout.connect(self.flush)
        self.reset()

    # --- lifecycle -----------------------------------------------------
    def reset(self) -> None:
        self.events: list = []
        self.passes: list[PassEvent] = []
        self.notices: list[NoticeEvent] = []
        self.start: StartEvent | None = None
        self.end: EndEvent | None = None
        self.series = GrowingColumns(PASS_COLUMNS)
        self.by_drafter: dict[str, DrafterSeries] = {}
        self._overall = RollingAcceptance(ROLLING_PASSES)
        self.positions = PositionAcceptance()
        self._ranks = RankAcceptance()  # P_r by sibling rank, for the expected tokens of tree passes
        self.changes: list[SettingChange] = []
        self._text_parts: list[str] = []
        self._tokens = 0
        self._dirty = True

    def begin(self) -> None:
        """Forget the previous run and start the refresh timer."""
        self.reset()
        self.sig_begun.emit()
        self._timer.start()

    def flush(self) -> None:
        if self._dirty:
            self._dirty = False
            self.sig_refresh.emit()

    # --- events ----------------------------------------------------------
    def on_event(self, event) -> None:
        self.events.append(event)
        self._dirty = True
        if isinstance(event, PassEvent):
            self._add_pass(event)
        elif isinstance(event, StartEvent):
            self.start = event
            self.sig_started.emit(event)
        elif isinstance(event, NoticeEvent):
            self.notices.append(event)
            self.sig_notice.emit(event)
        elif isinstance(event, EndEvent):
            self._finish(event)

    def _finish(self, event: EndEvent) -> None:
        self.end = event
        self._timer.stop()
        self.flush()  # the last partial tick must reach the widgets before "ended"
        self.sig_ended.emit(event)

    def _add_pass(self, event: PassEvent) -> None:
        self._note_change(event)
        self.passes.append(event)
        self._text_parts.extend(t.text for t in event.drafted if t.outcome in (ACCEPTED, ASD_EXCEPTION))
        if event.appended is not None:
            self._text_parts.append(event.appended.text)
        if event.drafter is not None and event.drafted:
            self.by_drafter.setdefault(event.drafter, DrafterSeries()).add(event)
        self._overall.add(event.drafted)
        self.positions.add(event.drafted)
        if event.tree:
            self._ranks.add_tree(event.tree)
        else:
            self._ranks.add_chain(event.drafted)
        self.series.append(self._pass_row(event))

    def _note_change(self, event: PassEvent) -> None:
        """File a SettingChange when this pass runs under another drafter, K or rule than the one before."""
        if not self.passes:
            return
        known = {p.drafter for p in self.passes[-ROLLING_PASSES:] if p.drafter is not None}
        if self.start is not None:
            known.update(self.start.settings.get("drafters", ()))
        found = setting_changes(self.passes[-1], event, known)
        if found:
            self.changes.append(SettingChange(len(self.passes), event.index, ", ".join(found)))

    def _pass_row(self, event: PassEvent) -> dict[str, float | None]:
        """One row of the charts: the engine's cumulative figures, and the theory at this pass's K."""
        committed = len(event.committed_ids)
        self._tokens += committed
        stats = event.stats
        alpha, c, v = stats.alpha, stats.c, stats.verify_cost
        k = self.k_setting or event.k
        return {
            "pass": event.index, "k": event.k, "drafted": len(event.drafted), "accepted": event.n_accepted,
            "committed": committed, "alpha_cum": alpha, "alpha_roll": self._overall.recent.alpha,
            "acceptance_rate": stats.acceptance_rate,
            "expected_tokens": self._expected_tokens(event, alpha),
            "ledger_spent": event.ledger.spent, "budget": event.ledger.budget,
            "exceptions": event.ledger.exceptions, "draft_ms": event.timing.draft_ms,
            "verify_ms": event.timing.verify_ms, "total_ms": event.timing.total_ms,
            "prompt_tokens": event.timing.prompt_tokens,
            "tokens_per_s": stats.tokens_per_s, "c": c, "verify_cost": v,
            "speedup_estimated": stats.estimated_speedup,
            "speedup_predicted": None if alpha is None or c is None else predicted_speedup(alpha, k, c),
            "speedup_predicted_verify": None if alpha is None or c is None or v is None
            else speedup_with_verify_cost(alpha, k, c, v),
        }

    def _expected_tokens(self, event: PassEvent, alpha: float | None) -> float | None:
        """The theory of this pass: E(α, K') of its own K' (a plain step, K' = 0, commits exactly 1), or for a
        tree pass 1 + the sum over its nodes of P(node accepted) (§9.4)."""
        if alpha is None:
            return None
        if event.tree:
            return expected_tree_tokens(self._ranks, Counter(rank_paths(event.tree)), 1)
        return expected_tokens_per_pass(alpha, len(event.drafted))

    # --- summaries ---------------------------------------------------------
    @property
    def generated_text(self) -> str:
        if self.end is not None and self.end.text:
            return self.end.text
        return self.streamed_text

    @property
    def streamed_text(self) -> str:
        """The text the passes committed, joined as it arrived (all a failed run leaves)."""
        return "".join(self._text_parts)

    @property
    def token_count(self) -> int:
        return self._tokens

    @property
    def tokens_per_s(self) -> float | None:
        if self.end is not None:
            return self.end.stats.tokens_per_s
        return self.passes[-1].stats.tokens_per_s if self.passes else None

    @property
    def stats(self) -> RunningStats | None:
        """The engine's cumulative figures: the end event's, or the latest pass's while the run streams."""
        if self.end is not None and self.end.passes:
            return self.end.stats
        return self.passes[-1].stats if self.passes else None

    @property
    def alpha(self) -> float | None:
        """α̂ = accepted / (accepted + passes that ended in a rejection), as the engine computed it."""
        return None if self.stats is None else self.stats.alpha

    @property
    def acceptance_rate(self) -> float | None:
        return None if self.stats is None else self.stats.acceptance_rate

    @property
    def k_setting(self) -> int | None:
        """The K the run is set to, not the last pass's K (which the token limit clips)."""
        if self.passes and self.passes[-1].k_setting is not None:
            return self.passes[-1].k_setting
        if self.start is not None and "k" in self.start.settings:
            return int(self.start.settings["k"])
        return self.passes[-1].k if self.passes else None

    def position_rates(self) -> list[float | None]:
        """alpha_i over the positions the target tested (docs/ALGORITHMS.md §7.4)."""
        return self.positions.rates()

    # --- exports -----------------------------------------------------------
    def export_jsonl(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8") as out:
            for event in self.events:
                out.write(to_json_line(event) + "\n")

    def export_csv(self, path: str | Path) -> None:
        with open(path, "w", encoding="utf-8", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(("pass", "drafter", "verify") + PASS_COLUMNS[1:])
            columns = [self.series[name] for name in PASS_COLUMNS[1:]]
            for row, event in enumerate(self.passes):
                values = [_csv_number(column[row]) for column in columns]
                writer.writerow([event.index, event.drafter or "", event.verify] + values)

    def export_text(self, path: str | Path) -> None:
        Path(path).write_text(self.generated_text, encoding="utf-8")


def _csv_number(value: float) -> str:
    if math.isnan(value):
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"
