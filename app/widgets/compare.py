"""Compare runs: a run pinned to the charts (drawn faded under the next runs) and the end-of-run summary table.

Nothing here computes a statistic: every figure is the engine's (app/engine/stats.py, carried by the
events' `RunningStats`, docs/ALGORITHMS.md §6-§7) or a column the session already holds. Notation:
α = accepted / (accepted + passes that ended in a rejection); acceptance rate = accepted / drafted;
E(α, K) = (1 - α^(K+1)) / (1 - α) averaged over the passes' own K; c = draft time per drafted token over
one target forward; v = verify forward over one target forward; estimated speedup = tokens · t_T / time.
The mean acceptance length 1 + accepted / drafting passes (vLLM's and SGLang's figure) is read from the end
event's acceptance summary when the engine reports one, else shown as "—".
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.widgets.theme import Theme, follow_theme

OVERLAY_OPACITY = 0.45  # a pinned run's lines: faded, under the live run's

# (column title, RunningStats field, format, tooltip); a field the engine does not (yet) report shows "—"
SUMMARY_FIELDS = (
    ("α", "alpha", "{:.3f}", "accepted / (accepted + passes that ended in a rejection): the α of E(α, K)"),
    ("acceptance rate", "acceptance_rate", "{:.3f}", "accepted / drafted"),
    ("mean acceptance length", "mean_acceptance_length", "{:.2f}",
     "1 + accepted / drafting passes (counts the bonus or correction token), as vLLM and SGLang report it"),
    ("tokens / pass", "tokens_per_pass", "{:.2f}", "tokens committed per pass, measured"),
    ("E(α, K)", "expected_tokens_per_pass", "{:.2f}", "tokens per pass the i.i.d. theory predicts"),
    ("c", "c", "{:.3f}", "draft time per drafted token over one target forward"),
    ("v", "verify_cost", "{:.2f}", "verify forward over one target forward of one token"),
    ("est. speedup", "estimated_speedup", "{:.2f}×", "tokens × t_T / time: an estimate, not a race"),
)


@dataclass(frozen=True)
class RunSummary:
    """One finished run as the summary table and the pinned overlays show it."""

    label: str
    drafter: str | None  # the drafter that ran most passes (its colour marks the run)
    stats: object  # the engine's RunningStats at the run's end
    acceptance: object | None  # the end event's acceptance summary, when the engine reports one
    passes: np.ndarray  # (P,) pass index
    alpha_by_drafter: dict[str, tuple[np.ndarray, np.ndarray]]  # drafter -> (passes, cumulative α)
    alpha: np.ndarray  # (P,) cumulative α, all drafters
    tokens_per_pass: np.ndarray  # (P,) the engine's cumulative tokens per pass
    tokens_per_s: np.ndarray  # (P,)
    speedup: np.ndarray  # (P,) estimated speedup

    def value(self, field: str) -> float | None:
        """A figure of the engine's: from its running statistics, else from its end-of-run acceptance summary."""
        value = getattr(self.stats, field, None)
        if value is None and self.acceptance is not None:
            value = getattr(self.acceptance, field, None)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def summary_of(session, number: int) -> RunSummary | None:
    """The session's run as a summary (None before its first pass)."""
    if not session.passes or session.stats is None:
        return None
    series = session.series
    counts = Counter(p.drafter for p in session.passes if p.drafter is not None)
    drafter = counts.most_common(1)[0][0] if counts else None
    by_drafter = {name: (d.columns["pass"].copy(), d.columns["alpha_cum"].copy())
                  for name, d in session.by_drafter.items()}
    return RunSummary(
        label=_label(session, number, drafter), drafter=drafter, stats=session.stats,
        acceptance=getattr(session.end, "acceptance", None),
        passes=series["pass"].copy(), alpha_by_drafter=by_drafter, alpha=series["alpha_cum"].copy(),
        tokens_per_pass=np.array([p.stats.tokens_per_pass for p in session.passes], dtype=float),
        tokens_per_s=series["tokens_per_s"].copy(), speedup=series["speedup_estimated"].copy())


def _label(session, number: int, drafter: str | None) -> str:
    last = session.passes[-1]
    k = session.k_setting
    parts = [f"run {number}", ", ".join(sorted(session.by_drafter)) or drafter or "no drafter"]
    if k is not None:
        parts.append(f"K={k}")
    parts.append(last.verify)
    return " · ".join(parts)


PinnedRun = RunSummary  # a pinned run is the summary of a finished (or stopped) run


def overlay_pen(colour: str, theme: Theme) -> pg.QtGui.QPen:
    """A pinned run's line: its drafter's colour, faded and dotted, thinner than the live run's."""
    faded = QColor(colour)
    faded.setAlphaF(OVERLAY_OPACITY)
    return pg.mkPen(faded, width=max(1.5, theme.line_px * 0.8), style=Qt.PenStyle.DotLine)


class RunSummaryTable(QWidget):
    """One row per finished run, accumulating for side-by-side comparison; rows can be removed or cleared."""

    sig_rows_changed = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("runSummary")
        self.summaries: list[RunSummary] = []
        self.table = QTableWidget(0, len(SUMMARY_FIELDS) + 1)
        self.table.setHorizontalHeaderLabels(["run"] + [title for title, *_ in SUMMARY_FIELDS])
        for column, (_title, _field, _fmt, tip) in enumerate(SUMMARY_FIELDS, start=1):
            header = self.table.horizontalHeaderItem(column)
            if header is not None:
                header.setToolTip(tip)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.remove_button = QPushButton("Remove selected")
        self.remove_button.clicked.connect(self.remove_selected)
        self.clear_button = QPushButton("Clear table")
        self.clear_button.clicked.connect(self.clear)
        note = QLabel("Each finished run adds a row. Every figure is the engine's own (docs/ALGORITHMS.md §7).")
        note.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(note, 1)
        buttons.addWidget(self.remove_button)
        buttons.addWidget(self.clear_button)
        stack = QVBoxLayout(self)
        stack.setContentsMargins(0, 0, 0, 0)
        stack.addWidget(self.table, 1)
        stack.addLayout(buttons)
        follow_theme(self, self.apply_theme)

    def apply_theme(self, theme: Theme) -> None:
        """The table's text at the charts' size (large in presentation mode)."""
        font = self.table.font()
        font.setPixelSize(theme.chart_px)
        self.table.setFont(font)
        self.table.horizontalHeader().setFont(font)
        self.table.verticalHeader().setDefaultSectionSize(round(theme.chart_px * 1.8))

    def set_session(self, session) -> None:
        """Add a row at the end of each of the session's runs that made at least one pass."""
        session.sig_ended.connect(lambda _event: self.add_run(session))

    def add_run(self, session) -> RunSummary | None:
        summary = summary_of(session, len(self.summaries) + 1)
        if summary is not None:
            self.add(summary)
        return summary

    def add(self, summary: RunSummary) -> None:
        self.summaries.append(summary)
        row = self.table.rowCount()
        self.table.insertRow(row)
        self.table.setItem(row, 0, QTableWidgetItem(summary.label))
        for column, (_title, field, fmt, _tip) in enumerate(SUMMARY_FIELDS, start=1):
            value = summary.value(field)
            item = QTableWidgetItem("—" if value is None else fmt.format(value))
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(row, column, item)
        self.sig_rows_changed.emit(self.table.rowCount())

    def cell_text(self, row: int, title: str) -> str:
        """The text of the column titled `title` in `row` (for tests and exports)."""
        column = ["run"] + [t for t, *_ in SUMMARY_FIELDS]
        item = self.table.item(row, column.index(title))
        return "" if item is None else item.text()

    def remove_selected(self) -> None:
        for row in sorted({index.row() for index in self.table.selectedIndexes()}, reverse=True):
            self.remove(row)

    def remove(self, row: int) -> None:
        self.table.removeRow(row)
        del self.summaries[row]
        self.sig_rows_changed.emit(self.table.rowCount())

    def clear(self) -> None:
        self.table.setRowCount(0)
        self.summaries.clear()
        self.sig_rows_changed.emit(0)
