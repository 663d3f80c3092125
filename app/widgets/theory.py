"""Theory explorer: the formulas of speculative decoding against what this run measured.

With i.i.d. acceptance alpha, K drafts per pass, c = draft time per drafted
token over one target forward of one token and v = verify forward over one
target forward (docs/ALGORITHMS.md §6-§7; every figure from app/engine/core/stats.py):

    E(alpha, K)          = (1 - alpha^(K+1)) / (1 - alpha)     tokens per pass
    speedup(alpha, K, c) = E(alpha, K) / (K c + 1)              (and E / (K c + v))

alpha is the run's α̂ = accepted / (accepted + passes that ended in a
rejection), never the acceptance rate accepted / drafted (§7.2). Four plots:
the family of E(alpha, K) curves for K = 1..8 (as in Leviathan et al.'s
figure) with the run's K drawn bold and the run's tokens per pass on it;
speedup against alpha for that K and c (plus the curve of the best K), with
the run's estimated speedup tokens · t_T / time; the optimal K against alpha
for c; and alpha_i at each draft position over the positions the target
tested, beside the flat line alpha that the i.i.d. model predicts. Sliders
set alpha (a cursor on the curves) and c. The optimal K is the K in
1..MAX_K with the highest predicted speedup for alpha and c.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.engine.core.stats import expected_tokens_per_pass, optimal_k, predicted_speedup, speedup_with_verify_cost
from app.engine.settings import MAX_K
from app.widgets import on_screen
from app.widgets.throttle import MIN_REDRAW_MS, RedrawThrottle

ALPHAS = np.linspace(0.0, 1.0, 201)
FAMILY = tuple(range(1, 9))  # the E(alpha, K) curves drawn together, as in Leviathan et al., Figure 2
ALPHA_STEPS = 100  # the alpha slider: 0..1 in steps of 0.01
C_STEPS, C_MAX = 200, 2.0  # the c slider: 0..C_MAX in steps of 0.01
FAMILY_COLOUR = "#9A9A9A"
CURSOR_COLOUR = "#CC79A7"
CURVE_COLOUR = "#0072B2"
BEST_COLOUR = "#009E73"
MEASURED_COLOUR = "#D55E00"


@dataclass(frozen=True)
class MeasuredPoint:
    """What a run measured; None where it has no value yet."""

    alpha: float | None = None  # α̂ (§7.1)
    c: float | None = None
    tokens_per_pass: float | None = None
    speedup: float | None = None  # estimated: tokens · t_T / time (the race measures a real plain run)
    k: int | None = None  # the K the run is set to
    acceptance_rate: float | None = None  # accepted / drafted (§7.2)
    verify_cost: float | None = None  # v = t_V / t_T


def best_k(alpha: float, c: float) -> int:
    """The K in 1..MAX_K with the highest predicted speedup (smallest on ties)."""
    return optimal_k(alpha, c, k_max=MAX_K)


def e_curve(k: int) -> np.ndarray:
    return np.array([expected_tokens_per_pass(float(a), k) for a in ALPHAS])


def speedup_curve(k: int, c: float) -> np.ndarray:
    return np.array([predicted_speedup(float(a), k, c) for a in ALPHAS])


def optimal_k_curve(c: float) -> np.ndarray:
    return np.array([best_k(float(a), c) for a in ALPHAS], dtype=float)


def measured_from(session) -> MeasuredPoint:
    """The run's latest cumulative figures, read from the session view-model."""
    if session is None or not session.passes:
        return MeasuredPoint()
    stats = session.stats
    return MeasuredPoint(alpha=stats.alpha, c=stats.c, tokens_per_pass=stats.tokens_per_pass,
                         speedup=stats.estimated_speedup, k=session.k_setting,
                         acceptance_rate=stats.acceptance_rate, verify_cost=stats.verify_cost)


class TheoryExplorer(QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._session = None
        self.measured = MeasuredPoint()
        self._throttle = RedrawThrottle(MIN_REDRAW_MS, self.refresh, self)
        self._build_controls()
        self._build_plots()
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setObjectName("theorySummary")
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._columns = 0
        self._layout()
        self.redraw()

    def _layout(self) -> None:
        """The controls and the words in a column on the left; the plots take the rest."""
        side = QWidget()
        column = QVBoxLayout(side)
        column.setContentsMargins(0, 0, 0, 0)
        column.addLayout(self.controls)
        column.addWidget(self.summary)
        column.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(side)
        scroll.setMinimumWidth(250)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # the words wrap instead
        scroll.setMaximumWidth(340)
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 4, 4, 4)
        row.addWidget(scroll)
        row.addWidget(self.plots, 1)

    # --- construction ----------------------------------------------------------------
    def _build_controls(self) -> None:
        self.k_spin = QSpinBox()
        self.k_spin.setRange(1, MAX_K)
        self.k_spin.setValue(4)
        self.k_spin.setToolTip("K: drafts per pass in the formulas")
        self.c_spin = QDoubleSpinBox()
        self.c_spin.setRange(0.0, 5.0)
        self.c_spin.setDecimals(3)
        self.c_spin.setSingleStep(0.01)
        self.c_spin.setValue(0.1)
        self.c_spin.setToolTip("c: cost of one draft step relative to one target forward")
        self.follow_run = QCheckBox("Follow the run (its K, α and c)")
        self.follow_run.setChecked(True)
        self.alpha_slider = _slider(ALPHA_STEPS, "α: acceptance per tested draft; a cursor on the curves")
        self.alpha_label = QLabel()
        self.c_slider = _slider(C_STEPS, f"c: draft cost per drafted token over one target forward (0..{C_MAX:g})")
        for widget in (self.k_spin, self.c_spin):
            widget.valueChanged.connect(self._edited_by_hand)
        self.alpha_slider.valueChanged.connect(self._edited_by_hand)
        self.c_slider.valueChanged.connect(self._c_slid)
        self.follow_run.toggled.connect(lambda _on: self.refresh())
        form = QFormLayout()
        form.addRow("K", self.k_spin)
        sliders = QFormLayout()
        sliders.addRow(self.alpha_label, self.alpha_slider)
        c_row = QHBoxLayout()
        c_row.addWidget(self.c_slider, 1)
        c_row.addWidget(self.c_spin)
        sliders.addRow("c", c_row)
        self.controls = QVBoxLayout()
        self.controls.addLayout(form)
        self.controls.addLayout(sliders)
        self.controls.addWidget(self.follow_run)
        self._sync_c_slider()

    def _build_plots(self) -> None:
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setBackground(None)
        self.e_plot = self._plot(0, "Tokens per pass E(α, K), K = 1..8; ● this run", "α = accepted / tested",
                                 "tokens per pass")
        self.family = self._family_curves(self.e_plot)
        self.e_line = self.e_plot.plot(pen=pg.mkPen(CURVE_COLOUR, width=3))
        self.e_point = self._measured_marker(self.e_plot)
        self.speedup_plot = self._plot(1, "Speedup E / (K c + 1); ● estimated", "α", "×")
        self.speedup_plot.addLegend(offset=(5, 5))
        self.speedup_plot.addItem(pg.InfiniteLine(1.0, angle=0, pen=pg.mkPen("#999999", style=Qt.PenStyle.DotLine)))
        self.speedup_line = self.speedup_plot.plot(pen=pg.mkPen(CURVE_COLOUR, width=2), name="this K")
        self.best_line = self.speedup_plot.plot(pen=pg.mkPen(BEST_COLOUR, width=1.5, style=Qt.PenStyle.DashLine),
                                                name="best K")
        self.speedup_point = self._measured_marker(self.speedup_plot)
        self.optimal_plot = self._plot(2, "Optimal K for c (speedup E / (K c + 1))", "α", "K")
        self.optimal_plot.addLegend(offset=(5, 5))
        self.optimal_line = self.optimal_plot.plot(pen=pg.mkPen(BEST_COLOUR, width=2.5), stepMode=None,
                                                   name="optimal K")
        self.optimal_point = self._measured_marker(self.optimal_plot)
        self.optimal_plot.legend.addItem(self.optimal_point, "this run's K")
        self.optimal_plot.setYRange(0, 2 * max(FAMILY), padding=0)  # K → 64 only as α → 1: that corner is cut
        self.cursors = [self._cursor(plot) for plot in (self.e_plot, self.speedup_plot, self.optimal_plot)]
        self.position_plot = self._plot(3, "α by draft position (tested); - - i.i.d. α", "position",
                                        "accepted / tested")
        self.position_plot.setYRange(0, 1)
        self.position_bars = pg.BarGraphItem(x=[], height=[], width=0.7, brush=CURVE_COLOUR)
        self.position_plot.addItem(self.position_bars)
        self.position_alpha = pg.InfiniteLine(angle=0, pen=pg.mkPen(MEASURED_COLOUR, style=Qt.PenStyle.DashLine))
        self.position_plot.addItem(self.position_alpha)

    def _plot(self, col: int, title: str, x_label: str, y_label: str) -> pg.PlotItem:
        plot = self.plots.addPlot(row=0, col=col)
        plot.setTitle(title, size="9pt")
        plot.setLabel("bottom", x_label)
        plot.setLabel("left", y_label)
        plot.showGrid(x=True, y=True, alpha=0.2)
        return plot

    @staticmethod
    def _family_curves(plot: pg.PlotItem) -> dict[int, pg.PlotDataItem]:
        """E(α, K) for K in FAMILY, thin and grey, each labelled at α = 1 where E = K + 1."""
        curves = {}
        for k in FAMILY:
            curves[k] = plot.plot(ALPHAS, e_curve(k), pen=pg.mkPen(FAMILY_COLOUR, width=1))
            label = pg.TextItem(f"K={k}", color=FAMILY_COLOUR, anchor=(1.0, 0.5))
            label.setPos(0.99, k + 1)
            plot.addItem(label)
        plot.setXRange(0, 1.0, padding=0.02)
        return curves

    @staticmethod
    def _cursor(plot: pg.PlotItem) -> pg.InfiniteLine:
        line = pg.InfiniteLine(angle=90, pen=pg.mkPen(CURSOR_COLOUR, width=1.5, style=Qt.PenStyle.DashLine))
        plot.addItem(line)
        return line

    @staticmethod
    def _measured_marker(plot: pg.PlotItem) -> pg.ScatterPlotItem:
        marker = pg.ScatterPlotItem(symbol="o", size=11, pen=pg.mkPen(MEASURED_COLOUR, width=2),
                                    brush=pg.mkBrush(MEASURED_COLOUR))
        plot.addItem(marker)
        return marker

    # --- binding ----------------------------------------------------------------------
    def set_session(self, session) -> None:
        self._session = session
        session.sig_refresh.connect(self.request_refresh)
        session.sig_started.connect(lambda _event: self.reset())
        session.sig_ended.connect(lambda _event: self.refresh())

    def reset(self) -> None:
        self.refresh()

    def request_refresh(self) -> None:
        """Redraw at most every MIN_REDRAW_MS, and only while visible."""
        if on_screen(self):
            self._throttle.request()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        wide = self.plots.width() > 3 * self.plots.height()
        self._arrange(4 if wide else 2)

    def _arrange(self, columns: int) -> None:
        """The four plots in one row when the panel is wide, else in two rows of two."""
        if columns == self._columns:
            return
        self._columns = columns
        plots = (self.e_plot, self.speedup_plot, self.optimal_plot, self.position_plot)
        layout = self.plots.ci
        for plot in plots:
            layout.removeItem(plot)
        for i, plot in enumerate(plots):
            layout.addItem(plot, row=i // columns, col=i % columns)

    def refresh(self) -> None:
        """Read the session's latest figures and redraw."""
        self._throttle.drawn()
        self.set_measured(measured_from(self._session))

    def set_measured(self, point: MeasuredPoint) -> None:
        """Show this measured point; with "follow" on, K, α and c follow the run."""
        self.measured = point
        if self.follow_run.isChecked():
            self._set_quietly(point.k, point.c, point.alpha)
        self.redraw()

    def _set_quietly(self, k: int | None, c: float | None, alpha: float | None = None) -> None:
        for spin, value in ((self.k_spin, k), (self.c_spin, c)):
            if value is not None:
                spin.blockSignals(True)
                spin.setValue(value)
                spin.blockSignals(False)
        if alpha is not None:
            self.alpha_slider.blockSignals(True)
            self.alpha_slider.setValue(round(alpha * ALPHA_STEPS))
            self.alpha_slider.blockSignals(False)
        self._sync_c_slider()

    def _sync_c_slider(self) -> None:
        self.c_slider.blockSignals(True)
        self.c_slider.setValue(round(min(self.c, C_MAX) / C_MAX * C_STEPS))
        self.c_slider.blockSignals(False)

    def _c_slid(self, value: int) -> None:
        self.c_spin.setValue(value * C_MAX / C_STEPS)  # its valueChanged stops following and redraws

    def _edited_by_hand(self) -> None:
        self.follow_run.blockSignals(True)
        self.follow_run.setChecked(False)  # a hand-picked K, α or c must not be overwritten by the next tick
        self.follow_run.blockSignals(False)
        self._sync_c_slider()
        self.redraw()

    # --- results ------------------------------------------------------------------------
    @property
    def k(self) -> int:
        return self.k_spin.value()

    @property
    def c(self) -> float:
        return self.c_spin.value()

    @property
    def alpha(self) -> float:
        """The α the slider is set to (the run's α̂ while following the run)."""
        return self.alpha_slider.value() / ALPHA_STEPS

    @property
    def optimal_k(self) -> int | None:
        """Best K for the measured alpha and c (the chosen c when the run has not measured one)."""
        alpha = self.measured.alpha
        if alpha is None:
            return None
        return best_k(alpha, self.measured.c if self.measured.c is not None else self.c)

    def position_rates(self) -> list[float | None]:
        return self._session.position_rates() if self._session is not None else []

    # --- drawing --------------------------------------------------------------------------
    def redraw(self) -> None:
        k, c = self.k, self.c
        self.e_line.setData(ALPHAS, e_curve(k))
        self.speedup_line.setData(ALPHAS, speedup_curve(k, c))
        self.optimal_line.setData(ALPHAS, optimal_k_curve(c))
        self.optimal_plot.setTitle(f"Optimal K against α at c = {c:.3g}", size="9pt")
        self.alpha_label.setText(f"α = {self.alpha:.2f}")
        for cursor in self.cursors:
            cursor.setValue(self.alpha)
        best = self.optimal_k
        if best is None:
            self.best_line.setData([], [])
        else:
            self.best_line.setData(ALPHAS, speedup_curve(best, self._c_for_best()))
        self._draw_measured()
        self._draw_positions()
        self.summary.setText(self.summary_text())

    def _c_for_best(self) -> float:
        return self.measured.c if self.measured.c is not None else self.c

    def _draw_measured(self) -> None:
        point = self.measured
        has_alpha = point.alpha is not None
        self.e_point.setData([point.alpha] if has_alpha and point.tokens_per_pass else [],
                             [point.tokens_per_pass] if has_alpha and point.tokens_per_pass else [])
        self.speedup_point.setData([point.alpha] if has_alpha and point.speedup else [],
                                   [point.speedup] if has_alpha and point.speedup else [])
        self.optimal_point.setData([point.alpha] if has_alpha and point.k else [],
                                   [point.k] if has_alpha and point.k else [])  # the K the run used

    def _draw_positions(self) -> None:
        rates = self.position_rates()
        x = [i + 1 for i, r in enumerate(rates) if r is not None]
        self.position_bars.setOpts(x=x, height=[r for r in rates if r is not None], width=0.7)
        if self.measured.alpha is not None:
            self.position_alpha.setValue(self.measured.alpha)
        self.position_alpha.setVisible(self.measured.alpha is not None)

    def summary_text(self) -> str:
        k, c = self.k, self.c
        point = self.measured
        theory = "Theory: at α = {a:.2f}, K = {k}, c = {c:.3g}: E = {e:.2f} tokens per pass, speedup {s:.2f}×."
        if point.alpha is None:
            return (f"No run measured yet. At K = {k} and c = {c:.3g} the best α = 1 gives E = {k + 1} and speedup "
                    f"{predicted_speedup(1.0, k, c):.2f}×. Generate to place the run on these curves. "
                    + self._cursor_text())
        measured = (f"Measured: α = {point.alpha:.3f} (accepted / tested positions; acceptance rate accepted / "
                    f"drafted = {_fmt(point.acceptance_rate)}), c = {_fmt(point.c)}, "
                    f"{_fmt(point.tokens_per_pass)} tokens per pass, estimated speedup {_fmt(point.speedup)}× "
                    "(tokens × one target forward / time; the race measures a real plain run).")
        best = self.optimal_k
        best_c = self._c_for_best()
        return " ".join(part for part in [
            measured,
            self._cursor_text(),
            theory.format(a=point.alpha, k=k, c=c, e=expected_tokens_per_pass(point.alpha, k),
                          s=predicted_speedup(point.alpha, k, c)),
            self._verify_cost_text(point.alpha, k, c),
            f"Optimal K for the measured α and c = {best_c:.3g}: {best} "
            f"(predicted {predicted_speedup(point.alpha, best, best_c):.2f}×).",
            "Bars that fall with the position mean acceptance is not i.i.d.: later drafts build on the "
            "drafter's own guesses.",
        ] if part)

    def _cursor_text(self) -> str:
        alpha, k, c = self.alpha, self.k, self.c
        if self.follow_run.isChecked() and self.measured.alpha is not None:
            return ""
        return (f"Slider: at α = {alpha:.2f}, K = {k}, c = {c:.3g}: E = {expected_tokens_per_pass(alpha, k):.2f}, "
                f"speedup {predicted_speedup(alpha, k, c):.2f}×, optimal K {best_k(alpha, c)}.")

    def _verify_cost_text(self, alpha: float, k: int, c: float) -> str:
        v = self.measured.verify_cost
        if v is None:
            return ""
        return (f"With the measured verify cost v = {v:.2f} one-token forwards: speedup E / (K c + v) = "
                f"{speedup_with_verify_cost(alpha, k, c, v):.2f}×.")


def _slider(steps: int, tip: str) -> QSlider:
    slider = QSlider(Qt.Orientation.Horizontal)
    slider.setRange(0, steps)
    slider.setToolTip(tip)
    slider.setMinimumWidth(60)
    return slider


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"
