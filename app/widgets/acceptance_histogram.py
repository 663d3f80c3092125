"""The acceptance histogram of a run against the i.i.d. prediction (docs/ALGORITHMS.md §7.7).

Bars: h_j = drafting passes that accepted exactly j drafts, j = 0..K. Points joined by a dashed line:
E[h_j] = sum_K n_K P_K(j), P_K(j) = alpha^j (1 - alpha) for j < K and alpha^K at j = K, each pass with its own
K. Bars that leave the points show that acceptance is not i.i.d. Below the plot, the figures vLLM and SGLang
report (mean acceptance length 1 + accepted / drafting passes, accepted / drafted, the unconditional
per-position rate) beside α and our conditional α_i. Every figure is the session's, which has it from
app/engine/core/stats.py: the engine's own at the end of a run.

Few bars, so a redraw is cheap; it still happens only while the tab shows (`on_visibility_changed` draws
what arrived behind it).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Protocol

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.engine.events import AcceptanceSummary
from app.widgets import on_screen
from app.widgets.run_view import RunView

BACKGROUND = "#FFFFFF"
TEXT_COLOUR = "#222222"
MEASURED_COLOUR = "#0072B2"  # Okabe-Ito blue, 5.2:1 on white
PREDICTED_COLOUR = "#A84400"  # a darker Okabe-Ito vermillion, 6.0:1 on white (text in it stays readable)
BAR_WIDTH = 0.6


class AcceptanceSource(RunView, Protocol):
    """What the histogram reads of the session (app/session.py): the run's signals, α and the field's figures."""

    @property
    def alpha(self) -> float | None: ...

    def acceptance_summary(self) -> AcceptanceSummary: ...


def relative_luminance(colour: str) -> float:
    """WCAG 2 relative luminance of a '#RRGGBB' colour."""
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio (1 to 21); normal text needs at least 4.5."""
    lighter, darker = sorted((relative_luminance(foreground), relative_luminance(background)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def _rates(values: Sequence[float | None]) -> str:
    return " ".join("–" if value is None else f"{value:.2f}" for value in values) or "–"


def _figure(value: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if value is None else fmt.format(value)


def describe(summary: AcceptanceSummary, alpha: float | None) -> str:
    """The figures as plain text, one per line (the label under the plot)."""
    lines = [
        f"Mean acceptance length (1 + accepted / drafting passes): {_figure(summary.mean_acceptance_length)}",
        f"Draft acceptance rate (accepted / drafted): {_figure(summary.draft_acceptance_rate)}"
        f"   ·   α (accepted / tested): {_figure(alpha)}",
        f"Per position, unconditional (vLLM, accepted at i / passes): {_rates(summary.acceptance_by_position)}",
        f"Per position, conditional (α_i, accepted at i / tested at i): {_rates(summary.alpha_by_position)}",
        f"Drafting passes: {summary.drafting_passes}   ·   accepted {summary.accepted} of {summary.drafted} drafted",
    ]
    if summary.predicted_histogram is None and summary.drafting_passes:
        lines.append("Token trees: the i.i.d. chain model predicts no histogram for them (§9.4).")
    return "\n".join(lines)


def end_of_run_figures(summary: AcceptanceSummary | None) -> str:
    """The short form for the status bar at the end of a run ('' when nothing was drafted)."""
    if summary is None or summary.mean_acceptance_length is None:
        return ""
    return (f"mean acceptance length {summary.mean_acceptance_length:.2f}, "
            f"draft acceptance rate {_figure(summary.draft_acceptance_rate)}")


class AcceptanceHistogramView(QWidget):
    """Measured acceptance histogram (bars) against the i.i.d. prediction at α (points), with the field's figures."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.summary: AcceptanceSummary | None = None  # what is drawn
        self._session: AcceptanceSource | None = None
        self._stale = False
        self.plot = pg.PlotWidget(background=BACKGROUND)
        self.plot.setMinimumHeight(160)
        self.plot.setMouseEnabled(x=False, y=False)
        self.plot.hideButtons()
        for side, title in (("bottom", "drafts accepted in a pass (j)"), ("left", "drafting passes")):
            axis = self.plot.getAxis(side)
            axis.setPen(TEXT_COLOUR)
            axis.setTextPen(TEXT_COLOUR)
            axis.setLabel(title, color=TEXT_COLOUR)
        self.bars = pg.BarGraphItem(x=[], height=[], width=BAR_WIDTH, brush=MEASURED_COLOUR, pen=MEASURED_COLOUR)
        self.prediction = pg.PlotDataItem(pen=pg.mkPen(PREDICTED_COLOUR, width=1.5, style=Qt.PenStyle.DashLine),
                                          symbol="o", symbolSize=8, symbolPen=pg.mkPen(PREDICTED_COLOUR, width=2),
                                          symbolBrush=BACKGROUND)
        self.plot.addItem(self.bars)
        self.plot.addItem(self.prediction)
        self.legend = QLabel(
            f'<span style="color:{MEASURED_COLOUR}">■</span>&nbsp;measured&nbsp;&nbsp;&nbsp;'
            f'<span style="color:{PREDICTED_COLOUR}">- ○ -</span>&nbsp;i.i.d. prediction at α')
        self.figures = QLabel("No run yet.")
        self.figures.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.figures.setWordWrap(True)
        for label in (self.legend, self.figures):
            label.setStyleSheet(f"color: {TEXT_COLOUR}; background: {BACKGROUND}; padding: 2px;")
        layout = QVBoxLayout(self)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.legend)
        layout.addWidget(self.figures)

    # --- binding ------------------------------------------------------------------
    def set_session(self, session: AcceptanceSource) -> None:
        self._session = session
        session.sig_begun.connect(self.clear)
        session.sig_refresh.connect(self.request_refresh)
        session.sig_ended.connect(lambda _end: self.refresh())

    def request_refresh(self) -> None:
        if on_screen(self):
            self.refresh()
        else:
            self._stale = True

    def on_visibility_changed(self, visible: bool) -> None:
        """The dock's tab was raised (a tabified dock gets no showEvent): draw what arrived behind it."""
        if visible and self._stale:
            self.refresh()

    def refresh(self) -> None:
        if self._session is None:
            return
        self._stale = False
        self.show_summary(self._session.acceptance_summary(), self._session.alpha)

    def clear(self) -> None:
        self.summary = None
        self.bars.setOpts(x=[], height=[])
        self.prediction.setData([], [])
        self.figures.setText("No drafting pass yet.")

    # --- drawing ------------------------------------------------------------------
    def show_summary(self, summary: AcceptanceSummary, alpha: float | None = None) -> None:
        self.summary = summary
        bins = list(range(len(summary.histogram)))
        self.bars.setOpts(x=bins, height=list(summary.histogram), width=BAR_WIDTH)
        predicted = summary.predicted_histogram
        if predicted is None:
            self.prediction.setData([], [])
        else:
            self.prediction.setData(bins, list(predicted))
        top = max([*summary.histogram, *(predicted or ()), 1])
        self.plot.setXRange(-0.5, len(bins) - 0.5, padding=0.02)
        self.plot.setYRange(0, top * 1.1, padding=0)
        self.plot.getAxis("bottom").setTicks([[(j, str(j)) for j in bins]])
        self.figures.setText(html.escape(describe(summary, alpha)).replace("\n", "<br>"))

    def bar_heights(self) -> list[int]:
        """The measured bars as drawn (for tests)."""
        heights = self.bars.opts.get("height")
        return [int(h) for h in heights] if heights is not None else []

    def predicted_points(self) -> list[float]:
        """The prediction's points as drawn (for tests)."""
        _x, y = self.prediction.getData()
        return [] if y is None else [float(value) for value in y]
