"""Live charts of a run (pyqtgraph): one `setData` per curve per refresh tick, from NumPy slices.

Every figure is read from the session, which has it from app/engine/stats.py
(docs/ALGORITHMS.md §6-§7). Plots: alpha = accepted / (accepted + passes that
ended in a rejection) per pass (rolling and cumulative, one colour per
drafter) with the acceptance rate accepted / drafted dotted beside it; tokens
per pass as bars with the theory line E(alpha, K') = (1 - alpha^(K'+1)) / (1 - alpha)
of each pass's K'; the ASD regret ledger (spent against B, exceptions marked);
tokens/s; the estimated speedup tokens · t_T / time against the predicted
E / (K c + 1) and E / (K c + v) with the measured c and verify cost v.

Painting, not data, is what costs (a full repaint of five plots is ~80-120 ms
of Python and QPainter work during which the window cannot react), so while a run
streams: the plots take turns, one per STAGGER_MS, so each paint covers one
plot, at a run's start and end too; axes are cached as pixmaps and each
plot's ranges grow in steps on its own turn, so ticks are laid out again only
when a range steps up, one plot at a time; curves are downsampled to the
plot's width and long bar series are binned, so a paint stays the same size at
10,000 passes as at 500; and nothing is redrawn when no pass arrived.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from pyqtgraph import exporters
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsItem, QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from app.widgets import on_screen
from app.widgets.throttle import MIN_REDRAW_MS, RedrawThrottle

PLOT_COUNT = 5
STAGGER_MS = MIN_REDRAW_MS // PLOT_COUNT  # one plot per turn: each plot is redrawn every MIN_REDRAW_MS
# The x axes grow in these steps, so axis ticks are not re-laid out every tick.
X_STEPS = (50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000)
MAX_BARS = 500  # more passes than this are drawn as bins of consecutive passes (their mean)
LEFT_AXIS_PX = 52  # room for labels such as "10000" with the axis title

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
DRAFTER_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999")
OVERALL_COLOUR = "#777777"


class RunCharts(QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._session = None
        self._from_row = 0  # rows before this were cleared from view
        self._x_spans: dict[int, tuple[float, float]] = {}  # plot index -> its stepped x range
        self._y_top: dict[int, float] = {}  # id(plot) -> top of its stepped y range
        self._turn = 0  # the plot whose turn is next
        self._drawn_rows = [-1] * PLOT_COUNT  # series size each plot last showed
        self._throttle = RedrawThrottle(STAGGER_MS, self._draw_next_plot, self)
        self.layout_widget = pg.GraphicsLayoutWidget()
        self.layout_widget.setBackground(None)
        self._build_plots()
        self.clear_button = QPushButton("Clear charts")
        self.clear_button.clicked.connect(self.clear)
        bar = QHBoxLayout()
        bar.addStretch(1)
        bar.addWidget(self.clear_button)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.layout_widget, 1)
        column.addLayout(bar)

    # --- construction -------------------------------------------------------------
    def _plot(self, row: int, col: int, title: str, y_label: str) -> pg.PlotItem:
        plot = self.layout_widget.addPlot(row=row, col=col, title=title)
        plot.setLabel("bottom", "pass")
        plot.setLabel("left", y_label)
        plot.showGrid(x=True, y=True, alpha=0.2)
        plot.enableAutoRange(x=False, y=False)  # ranges grow in steps (_fit_x, _grow_y), never per tick
        for name in ("left", "bottom"):
            # An axis (with its grid) is replayed from a picture at every paint otherwise.
            plot.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        # A fixed width: wider tick labels (500 -> 1000) would otherwise re-lay out the whole grid of plots,
        # and every axis of every plot would be drawn again in one paint.
        plot.getAxis("left").setWidth(LEFT_AXIS_PX)
        return plot

    def _line(self, plot: pg.PlotItem, **options) -> pg.PlotDataItem:
        """A curve drawn with at most about one point per pixel of the plot's width."""
        curve = plot.plot(**options)
        curve.setDownsampling(auto=True, method="peak")
        curve.setClipToView(True)
        return curve

    def _build_plots(self) -> None:
        self.alpha_plot = self._plot(0, 0, "α = accepted / tested, per pass", "α")
        self.alpha_plot.setYRange(0, 1)
        self.alpha_plot.addLegend(offset=(5, 5))
        self.overall_alpha = self._line(self.alpha_plot, pen=pg.mkPen(OVERALL_COLOUR, width=2), name="α, all")
        self.acceptance_rate = self._line(self.alpha_plot, pen=pg.mkPen(OVERALL_COLOUR, width=1,
                                                                       style=Qt.PenStyle.DotLine),
                                          name="accepted / drafted")
        self.drafter_curves: dict[str, tuple[pg.PlotDataItem, pg.PlotDataItem]] = {}

        self.tokens_plot = self._plot(0, 1, "Tokens per pass vs E(α, K)", "tokens")
        self.tokens_bars = self.tokens_plot.plot(stepMode="center", fillLevel=0, pen=pg.mkPen("#0072B2"),
                                                 brush=pg.mkBrush(0, 114, 178, 90))
        self.tokens_theory = self._line(self.tokens_plot, pen=pg.mkPen("#D55E00", width=2, style=Qt.PenStyle.DashLine))

        self.ledger_plot = self._plot(0, 2, "ASD regret ledger", "regret")
        self.ledger_spent = self._line(self.ledger_plot, pen=pg.mkPen("#CC79A7", width=2))
        self.ledger_budget = self._line(self.ledger_plot, pen=pg.mkPen("#999999", width=1, style=Qt.PenStyle.DashLine))
        self.ledger_marks = pg.ScatterPlotItem(symbol="x", size=9, pen=pg.mkPen("#D55E00"), brush=None)
        self.ledger_plot.addItem(self.ledger_marks)

        self.speed_plot = self._plot(1, 0, "Throughput", "tokens/s")
        self.tokens_per_s = self._line(self.speed_plot, pen=pg.mkPen("#009E73", width=2))

        self.speedup_plot = self._plot(1, 1, "Speedup: estimated vs predicted", "×")
        self.speedup_plot.addLegend(offset=(5, 5))
        self.speedup_plot.addItem(pg.InfiniteLine(1.0, angle=0, pen=pg.mkPen("#999999", style=Qt.PenStyle.DotLine)))
        self.speedup_estimated = self._line(self.speedup_plot, pen=pg.mkPen("#0072B2", width=2),
                                            name="estimated (tokens × t_T / time)")
        self.speedup_predicted = self._line(
            self.speedup_plot, pen=pg.mkPen("#E69F00", width=2, style=Qt.PenStyle.DashLine), name="E / (Kc + 1)")
        self.speedup_predicted_verify = self._line(
            self.speedup_plot, pen=pg.mkPen("#CC79A7", width=2, style=Qt.PenStyle.DotLine), name="E / (Kc + v)")
        self._plots = (self.alpha_plot, self.tokens_plot, self.ledger_plot, self.speed_plot, self.speedup_plot)

    # --- binding ------------------------------------------------------------------
    def set_session(self, session) -> None:
        self._session = session
        session.sig_refresh.connect(self.request_refresh)
        session.sig_started.connect(lambda _event: self.reset())
        session.sig_ended.connect(lambda _event: self.request_refresh())  # the final state, plot by plot

    def request_refresh(self) -> None:
        """Redraw the next plot now, or STAGGER_MS after the previous one; not at all while hidden."""
        if self._on_screen():
            self._throttle.request()

    def _on_screen(self) -> bool:
        return on_screen(self)

    def _draw_next_plot(self) -> None:
        """Bring the next out-of-date plot up to the session; come back for the others."""
        behind = self._plots_behind()
        if not behind:
            return  # nothing arrived since every plot was drawn
        self._throttle.drawn()
        self._draw(behind[0])
        self._turn = (behind[0] + 1) % PLOT_COUNT
        if len(behind) > 1:
            self._throttle.again_later()

    def _plots_behind(self) -> list[int]:
        """Plots not showing the session's latest pass, in turn order from the next plot's turn."""
        if self._session is None:
            return []
        rows = self._session.series.size
        order = [(self._turn + i) % PLOT_COUNT for i in range(PLOT_COUNT)]
        return [i for i in order if self._drawn_rows[i] != rows]

    def reset(self) -> None:
        """A new run: show it from its first pass; the plots are redrawn in turns."""
        self._from_row = 0
        self._x_spans.clear()
        self._y_top.clear()
        for rolling, cumulative in self.drafter_curves.values():
            rolling.setData([], [])
            cumulative.setData([], [])
        self._drawn_rows = [-1] * PLOT_COUNT
        self.request_refresh()

    def clear(self) -> None:
        """Hide the passes so far; later passes keep appearing. The session keeps all data for export."""
        self._from_row = self._session.series.size if self._session else 0
        self._x_spans.clear()
        self._y_top.clear()
        self.refresh()

    # --- drawing --------------------------------------------------------------------
    def refresh(self) -> None:
        """Redraw every plot now (a run's start and end, clear, export)."""
        if self._session is None:
            return
        self._throttle.drawn()
        for index in range(PLOT_COUNT):
            self._draw(index)

    def _draw(self, index: int) -> None:
        """Redraw plot `index` (0 alpha, 1 tokens, 2 ledger, 3 throughput, 4 speedup) from the session."""
        series = self._session.series
        self._drawn_rows[index] = series.size
        rows = slice(self._from_row, series.size)
        x = series["pass"][rows]
        self._fit_x(index, x)
        if index == 0:
            self.overall_alpha.setData(x, series["alpha_cum"][rows], connect="finite")
            self.acceptance_rate.setData(x, series["acceptance_rate"][rows], connect="finite")
            self._draw_drafters(x[0] if len(x) else np.inf)
        elif index == 1:
            self._draw_tokens(x, series["committed"][rows], series["expected_tokens"][rows])
        elif index == 2:
            self._draw_ledger(x, series["ledger_spent"][rows], series["budget"][rows], series["exceptions"][rows])
        elif index == 3:
            self.tokens_per_s.setData(x, series["tokens_per_s"][rows], connect="finite")
            self._grow_y(self.speed_plot, series["tokens_per_s"][rows])
        else:
            estimated, predicted = series["speedup_estimated"][rows], series["speedup_predicted"][rows]
            with_verify = series["speedup_predicted_verify"][rows]
            self.speedup_estimated.setData(x, estimated, connect="finite")
            self.speedup_predicted.setData(x, predicted, connect="finite")
            self.speedup_predicted_verify.setData(x, with_verify, connect="finite")
            self._grow_y(self.speedup_plot, estimated, predicted, with_verify, floor=2.0)

    def _grow_y(self, plot: pg.PlotItem, *values: np.ndarray, floor: float = 1.0) -> None:
        """Show 0 .. a round ceiling above the data; the range only steps up (within a run)."""
        finite = [v[np.isfinite(v)] for v in values]
        top = max([floor] + [float(v.max()) for v in finite if v.size])
        if top > self._y_top.get(id(plot), 0.0):
            ceiling = _round_up(top)
            self._y_top[id(plot)] = ceiling
            plot.setYRange(0.0, ceiling, padding=0.02)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if self._plots_behind():  # passes arrived while the charts were hidden
            self.refresh()

    def _fit_x(self, index: int, x: np.ndarray) -> None:
        """Step plot `index`'s x range up to hold `x`; only this plot is laid out again."""
        first = float(x[0]) if len(x) else 0.0
        last = float(x[-1]) if len(x) else 0.0
        width = next((step for step in X_STEPS if step > last - first), last - first + 1)
        span = (first - 0.5, first + width + 0.5)
        if span != self._x_spans.get(index):
            self._x_spans[index] = span
            self._plots[index].setXRange(*span, padding=0)

    def _draw_drafters(self, first_pass: float) -> None:
        """Each drafter's curves; at most one drafter's new curves per call (a legend entry is costly)."""
        may_add = True
        for name, drafter in self._session.by_drafter.items():
            if name not in self.drafter_curves:
                if not may_add:
                    self._drawn_rows[0] = -1  # come back for the others on the next turn
                    continue
                may_add = False
            rolling, cumulative = self._curves_for(name)
            passes = drafter.columns["pass"]
            shown = slice(int(np.searchsorted(passes, first_pass)), None)
            rolling.setData(passes[shown], drafter.columns["alpha_roll"][shown], connect="finite")
            cumulative.setData(passes[shown], drafter.columns["alpha_cum"][shown], connect="finite")

    def _curves_for(self, name: str) -> tuple[pg.PlotDataItem, pg.PlotDataItem]:
        if name not in self.drafter_curves:
            colour = DRAFTER_COLOURS[len(self.drafter_curves) % len(DRAFTER_COLOURS)]
            rolling = self.alpha_plot.plot(pen=pg.mkPen(colour, width=2), name=f"{name}, rolling")
            cumulative = self.alpha_plot.plot(pen=pg.mkPen(colour, width=1, style=Qt.PenStyle.DashLine),
                                              name=f"{name}, cumulative")
            self.drafter_curves[name] = (rolling, cumulative)
        return self.drafter_curves[name]

    def _draw_tokens(self, x: np.ndarray, committed: np.ndarray, expected: np.ndarray) -> None:
        edges, heights = _bars(x, committed)
        self.tokens_bars.setData(edges, heights)
        self.tokens_theory.setData(x, expected, connect="finite")
        self._grow_y(self.tokens_plot, committed, expected, floor=2.0)

    def _draw_ledger(self, x, spent, budget, exceptions) -> None:
        self.ledger_spent.setData(x, spent)
        self.ledger_budget.setData(x, budget)
        new_exception = np.flatnonzero(np.diff(exceptions, prepend=0.0) > 0) if len(x) else []
        self.ledger_marks.setData(x[new_exception], spent[new_exception])
        self._grow_y(self.ledger_plot, spent, budget)

    # --- export -----------------------------------------------------------------------
    def export_png(self, path: str) -> None:
        exporter = exporters.ImageExporter(self.layout_widget.scene())
        exporter.parameters()["width"] = max(800, int(self.layout_widget.width()))
        exporter.export(str(path))

    def point_counts(self) -> dict[str, int]:
        """Points drawn per curve (for tests and diagnostics); past MAX_BARS passes, bars count bins."""
        curves = {"alpha": self.overall_alpha, "tokens_theory": self.tokens_theory, "ledger": self.ledger_spent,
                  "tokens_per_s": self.tokens_per_s, "speedup_estimated": self.speedup_estimated,
                  "speedup_predicted": self.speedup_predicted}
        counts = {name: len(curve.getData()[0] if curve.getData()[0] is not None else [])
                  for name, curve in curves.items()}
        bars_y = self.tokens_bars.getData()[1]
        counts["tokens_bars"] = 0 if bars_y is None else len(bars_y)
        return counts


def _bars(x: np.ndarray, heights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Step-mode bar edges (n + 1) and heights (n); over MAX_BARS passes, bins of consecutive passes (their mean)."""
    if not len(x):
        return np.array([]), np.array([])
    if len(x) <= MAX_BARS:
        return np.append(x - 0.5, x[-1] + 0.5), heights
    size = -(-len(x) // MAX_BARS)
    starts = np.arange(0, len(x), size)
    means = np.add.reduceat(heights, starts) / np.diff(np.append(starts, len(x)))
    return np.append(x[starts] - 0.5, x[-1] + 0.5), means


def _round_up(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^n at or above `value`."""
    if value <= 0:
        return 1.0
    power = 10.0 ** np.floor(np.log10(value))
    return float(next(step * power for step in (1, 2, 5, 10) if step * power >= value))
