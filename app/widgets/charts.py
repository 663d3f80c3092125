"""Live charts of a run (pyqtgraph): one `setData` per curve per refresh tick, from NumPy slices.

Every figure is read from the session, which has it from app/engine/core/stats.py
(docs/ALGORITHMS.md §6-§7). Plots: alpha = accepted / (accepted + passes that
ended in a rejection) per pass (rolling and cumulative, one colour per
drafter) with the acceptance rate accepted / drafted dotted beside it; tokens
per pass as bars with the theory line E(alpha, K') = (1 - alpha^(K'+1)) / (1 - alpha)
of each pass's K' (for a token tree, 1 + the sum over its nodes of the chance
each is accepted, §9.4); the ASD regret ledger (spent against B, exceptions marked);
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

Each plot has its legend under it, as a compact table of text (never over the
curves, never clipped), and a minimum height; the grid scrolls when the dock
is smaller than that. The grid reflows to the dock's width: three plots to a
row when they fit beside each other at their minimum widths, else two, else
one (the Classroom layout's larger text in a small window), and it tells its
scroll area the minimum size of the arrangement it shows, so a plot is never
drawn past the dock's edge: the area scrolls to it instead, sideways only
when not even one plot fits across. A raised tab redraws what arrived while
it was behind (`on_visibility_changed`). Vertical markers show where the drafter, K or rule
changed mid-run (`Session.changes`).
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from pyqtgraph import exporters
from PySide6.QtCore import QEvent, QObject, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsItem,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.widgets import on_screen
from app.widgets.throttle import MIN_REDRAW_MS, RedrawThrottle

PLOT_COUNT = 5
STAGGER_MS = MIN_REDRAW_MS // PLOT_COUNT  # one plot per turn: each plot is redrawn every MIN_REDRAW_MS
# The x axes grow in these steps, so axis ticks are not re-laid out every tick.
X_STEPS = (50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000)
MAX_BARS = 500  # more passes than this are drawn as bins of consecutive passes (their mean)
LEFT_AXIS_PX = 52  # room for labels such as "10000" with the axis title
MIN_ROW_PX = 200  # a row of plots (title, plot, axis, legend) never gets less; the grid scrolls instead
MIN_DOCK_PX = 200  # the charts never collapse to nothing in a small window
MAX_COLUMNS = 3  # plots to a row when the dock is wide enough; fewer when it is not
SETTLE_ROWS = 8  # the first passes' estimates are noisy: a spike there does not set a y range for good
BASE_TEXT_PT = 9.0
GAUGE_PX = 120  # the ASD budget bar (its figures are in words beside it)
# Line glyphs of the legends, one per pen style
SOLID, DASHED, DOTTED, CROSS = "━━", "╍╍", "┈┈", "✕"

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
        self._markers: list[list[pg.InfiniteLine]] = [[] for _ in range(PLOT_COUNT)]  # per plot: change markers
        self._text_scale = 1.0
        self._cells: list[pg.GraphicsLayout] = []  # each plot with its legend, in reading order
        self.columns = MAX_COLUMNS  # plots to a row, as laid out now
        self._throttle = RedrawThrottle(STAGGER_MS, self._draw_next_plot, self)
        self.layout_widget = pg.GraphicsLayoutWidget()
        self.layout_widget.setBackground(None)
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self._build_plots()
        self.scroll.setWidget(self.layout_widget)
        self.scroll.installEventFilter(self)  # its width sets the number of plots to a row
        self._reflow()
        self._build_gauge()
        self.clear_button = QPushButton("Clear charts")
        self.clear_button.clicked.connect(self.clear)
        bar = QHBoxLayout()
        bar.addWidget(self.budget_title)
        bar.addWidget(self.budget_gauge)
        bar.addWidget(self.budget_note, 1)
        bar.addWidget(self.clear_button)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.scroll, 1)
        column.addLayout(bar)
        self.setMinimumHeight(MIN_DOCK_PX)

    # --- construction -------------------------------------------------------------
    def _plot(self, title: str, y_label: str) -> pg.PlotItem:
        index = len(self._cells)
        cell = self.layout_widget.addLayout(row=index // MAX_COLUMNS, col=index % MAX_COLUMNS)
        cell.setContentsMargins(0, 0, 0, 0)
        self._cells.append(cell)
        plot = cell.addPlot(row=0, col=0, title=title)
        plot.setLabel("bottom", "pass")
        plot.setLabel("left", y_label)
        plot.showGrid(x=True, y=True, alpha=0.2)
        plot.enableAutoRange(x=False, y=False)  # ranges grow in steps (_fit_x, _fit_y), never per tick
        for name in ("left", "bottom"):
            # An axis (with its grid) is replayed from a picture at every paint otherwise.
            plot.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        # A fixed width: wider tick labels (500 -> 1000) would otherwise re-lay out the whole grid of plots,
        # and every axis of every plot would be drawn again in one paint.
        plot.getAxis("left").setWidth(LEFT_AXIS_PX)
        plot.legend_label = cell.addLabel(row=1, col=0, justify="left")  # the legend: text under the plot
        plot.legend_entries = []  # (colour, glyph, name)
        plot.plain_title = title
        return plot

    def _line(self, plot: pg.PlotItem, glyph: str = SOLID, name: str | None = None, **options) -> pg.PlotDataItem:
        """A curve drawn with at most about one point per pixel of the plot's width; named ones join the legend."""
        curve = plot.plot(**options)
        curve.setDownsampling(auto=True, method="peak")
        curve.setClipToView(True)
        if name is not None:
            plot.legend_entries.append((options["pen"].color().name(), glyph, name))
        return curve

    def _build_plots(self) -> None:
        self.alpha_plot = self._plot("α = accepted / tested, per pass", "α")
        self.alpha_plot.setYRange(0, 1, padding=0.02)
        self.alpha_plot.setMouseEnabled(x=True, y=False)  # α is a probability: the axis stays 0-1
        self.overall_alpha = self._line(self.alpha_plot, SOLID, "α, all", pen=pg.mkPen(OVERALL_COLOUR, width=2))
        self.acceptance_rate = self._line(self.alpha_plot, DOTTED, "accepted / drafted",
                                          pen=pg.mkPen(OVERALL_COLOUR, width=1, style=Qt.PenStyle.DotLine))
        self.drafter_curves: dict[str, tuple[pg.PlotDataItem, pg.PlotDataItem]] = {}

        self.tokens_plot = self._plot("Tokens per pass vs E(α, K)", "tokens")
        self.tokens_bars = self.tokens_plot.plot(stepMode="center", fillLevel=0, pen=pg.mkPen("#0072B2"),
                                                 brush=pg.mkBrush(0, 114, 178, 90))
        self.tokens_plot.legend_entries.append(("#0072B2", "▇", "committed"))
        self.tokens_theory = self._line(self.tokens_plot, DASHED, "E(α, K); a tree: 1 + Σ P(node)",
                                        pen=pg.mkPen("#D55E00", width=2, style=Qt.PenStyle.DashLine))

        self.ledger_plot = self._plot("ASD regret ledger", "regret")
        self.ledger_spent = self._line(self.ledger_plot, SOLID, "spent", pen=pg.mkPen("#CC79A7", width=2))
        self.ledger_budget = self._line(self.ledger_plot, DASHED, "budget B",
                                        pen=pg.mkPen("#999999", width=1, style=Qt.PenStyle.DashLine))
        self.ledger_marks = pg.ScatterPlotItem(symbol="x", size=9, pen=pg.mkPen("#D55E00"), brush=None)
        self.ledger_plot.addItem(self.ledger_marks)
        self.ledger_plot.legend_entries.append(("#D55E00", CROSS, "exception"))
        self.ledger_note = pg.TextItem("ASD off", color="#777777", anchor=(0.5, 0.5))
        self.ledger_plot.getViewBox().addItem(self.ledger_note, ignoreBounds=True)

        self.speed_plot = self._plot("Throughput", "tokens/s")
        self.tokens_per_s = self._line(self.speed_plot, SOLID, "tokens/s", pen=pg.mkPen("#009E73", width=2))

        self.speedup_plot = self._plot("Speedup: estimated vs predicted", "×")
        self.speedup_plot.addItem(pg.InfiniteLine(1.0, angle=0, pen=pg.mkPen("#999999", style=Qt.PenStyle.DotLine)))
        self.speedup_estimated = self._line(self.speedup_plot, SOLID, "estimated (tokens × t_T / time)",
                                            pen=pg.mkPen("#0072B2", width=2))
        self.speedup_predicted = self._line(self.speedup_plot, DASHED, "E / (Kc + 1)",
                                            pen=pg.mkPen("#E69F00", width=2, style=Qt.PenStyle.DashLine))
        self.speedup_predicted_verify = self._line(self.speedup_plot, DOTTED, "E / (Kc + v)",
                                                   pen=pg.mkPen("#CC79A7", width=2, style=Qt.PenStyle.DotLine))
        self._plots = (self.alpha_plot, self.tokens_plot, self.ledger_plot, self.speed_plot, self.speedup_plot)
        for plot in self._plots:
            self._show_legend(plot)

    def _build_gauge(self) -> None:
        """ASD budget left of B as a bar, its figures and the exceptions (and, once spent, strict greedy) in words
        beside it: no text in the bar, where it would run over the fill or be clipped."""
        self.budget_title = QLabel("ASD budget")
        self.budget_gauge = QProgressBar()
        self.budget_gauge.setRange(0, 1000)
        self.budget_gauge.setTextVisible(False)
        self.budget_gauge.setFixedWidth(GAUGE_PX)
        self.budget_gauge.setToolTip("ASD regret budget left of B; beside it, the exceptions granted so far")
        self.budget_note = QLabel()
        self.budget_note.setObjectName("asdBudgetNote")
        self.budget_note.setTextFormat(Qt.TextFormat.RichText)
        self.budget_note.setWordWrap(True)
        self._show_budget(None)
        self.budget_state = "off"  # "off" (not ASD), "on", or "spent" (ASD is now strict greedy)

    # --- legends and text size ------------------------------------------------------
    def _show_legend(self, plot: pg.PlotItem, note: str = "") -> None:
        """The plot's entries as a compact table of text under it, two or three to a line."""
        per_line = 3 if len(plot.legend_entries) > 4 else 2
        cells = [f'<span style="color:{colour}">{glyph}</span>&nbsp;{html.escape(name)}'
                 for colour, glyph, name in plot.legend_entries]
        lines = ["&nbsp;&nbsp;&nbsp;".join(cells[i:i + per_line]) for i in range(0, len(cells), per_line)]
        if note:
            lines.append(f"<i>{html.escape(note)}</i>")
        plot.legend_label.setText("<br>".join(lines), size=f"{BASE_TEXT_PT * self._text_scale:.1f}pt")
        if len(self._cells) == PLOT_COUNT:  # built: a wider legend may need another arrangement
            self._reflow()

    def set_text_scale(self, scale: float) -> None:
        """Titles, axes and legends at `scale` times the normal size (the Classroom layout)."""
        self._text_scale = scale
        points = BASE_TEXT_PT * scale
        for plot in self._plots:
            font = QFont()
            font.setPointSizeF(points)
            plot.setTitle(plot.plain_title, size=f"{points + 1:.1f}pt")
            for name in ("left", "bottom"):
                axis = plot.getAxis(name)
                axis.setStyle(tickFont=font)
                axis.label.setFont(font)
            plot.getAxis("left").setWidth(int(LEFT_AXIS_PX * scale))
            self._show_legend(plot, self._alpha_note() if plot is self.alpha_plot else "")
        self._reflow()

    # --- reflowing the grid -----------------------------------------------------------
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.scroll and event.type() == QEvent.Type.Resize:
            self._reflow()
        return super().eventFilter(watched, event)

    def grid_minimum(self, columns: int) -> QSize:
        """The smallest size of the grid with `columns` plots to a row: every plot and legend at its minimum
        size, with the grid's spacing and margins, and MIN_ROW_PX (scaled) a row at least."""
        grid = self.layout_widget.ci.layout
        minimum = [cell.effectiveSizeHint(Qt.SizeHint.MinimumSize) for cell in self._cells]
        rows = -(-len(minimum) // columns)
        widths = [max(size.width() for size in minimum[col::columns]) for col in range(columns)]
        heights = [max(size.height() for size in minimum[row * columns:(row + 1) * columns]) for row in range(rows)]
        left, top, right, bottom = grid.getContentsMargins()
        width = sum(widths) + grid.horizontalSpacing() * (columns - 1) + left + right
        height = max(sum(heights) + grid.verticalSpacing() * (rows - 1) + top + bottom,
                     rows * MIN_ROW_PX * self._text_scale)
        frame = 2 * self.layout_widget.frameWidth()
        return QSize(int(np.ceil(width)) + frame, int(np.ceil(height)) + frame)

    def _fitting_columns(self) -> int:
        """The most plots to a row that fit across the scroll area, less its vertical scroll bar when the
        grid is taller than the area (one when not even one fits: then the area scrolls sideways)."""
        room = self.scroll.contentsRect().size()
        bar = self.scroll.verticalScrollBar().sizeHint().width()
        for columns in range(MAX_COLUMNS, 1, -1):
            need = self.grid_minimum(columns)
            if need.width() <= room.width() - (bar if need.height() > room.height() else 0):
                return columns
        return 1

    def _reflow(self) -> None:
        """Lay the plots out in as many columns as fit, in reading order, and give the scroll area the
        arrangement's minimum size: it scrolls to what does not fit rather than the grid being squeezed."""
        columns = self._fitting_columns()
        if columns != self.columns:
            self.columns = columns
            layout = self.layout_widget.ci
            grid = layout.layout
            for cell in self._cells:
                grid.removeAt(next(i for i in range(grid.count()) if grid.itemAt(i) is cell))
            layout.rows, layout.items = {}, {}
            for index, cell in enumerate(self._cells):
                row, col = divmod(index, columns)
                grid.addItem(cell, row, col)
                layout.rows.setdefault(row, {})[col] = cell
                layout.items[cell] = [(row, col)]
        minimum = self.grid_minimum(self.columns)
        if minimum != self.layout_widget.minimumSize():
            self.layout_widget.setMinimumSize(minimum)

    def cell_rects(self) -> list[QRect]:
        """Each plot with its title, axes and legend, in the grid widget's pixels (for layout tests)."""
        view = self.layout_widget
        return [view.mapFromScene(QRectF(cell.sceneBoundingRect())).boundingRect() for cell in self._cells]

    def plot_cells(self) -> list[tuple[int, int]]:
        """(row, column) of each plot in the grid, in reading order (for tests)."""
        return [self.layout_widget.ci.items[cell][0] for cell in self._cells]

    def _alpha_note(self) -> str:
        return "per drafter: solid rolling (16 passes), dashed cumulative" if self.drafter_curves else ""

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

    def on_visibility_changed(self, visible: bool) -> None:
        """The dock's tab was raised (a tabified dock gets no showEvent): draw what arrived behind it."""
        if visible and self._plots_behind():
            self.refresh()

    def plot_heights(self) -> list[float]:
        """Height in pixels of each plot's data area (for layout tests)."""
        return [plot.getViewBox().height() for plot in self._plots]

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
        """A new run: show it from its first pass, without the drafters and markers of the run before."""
        self._from_row = 0
        self._x_spans.clear()
        self._y_top.clear()
        for rolling, cumulative in self.drafter_curves.values():
            self.alpha_plot.removeItem(rolling)
            self.alpha_plot.removeItem(cumulative)
        self.drafter_curves.clear()
        del self.alpha_plot.legend_entries[2:]
        self._show_legend(self.alpha_plot)
        for index, markers in enumerate(self._markers):
            for marker in markers:
                self._plots[index].removeItem(marker)
            markers.clear()
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
        """Redraw every plot now (a run's start and end, clear, export, a raised tab)."""
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
        self._draw_markers(index)
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
            self._fit_y(self.speed_plot, self._settled(series["tokens_per_s"]))
        else:
            estimated, predicted = series["speedup_estimated"][rows], series["speedup_predicted"][rows]
            with_verify = series["speedup_predicted_verify"][rows]
            self.speedup_estimated.setData(x, estimated, connect="finite")
            self.speedup_predicted.setData(x, predicted, connect="finite")
            self.speedup_predicted_verify.setData(x, with_verify, connect="finite")
            settled = [self._settled(series[name]) for name in
                       ("speedup_estimated", "speedup_predicted", "speedup_predicted_verify")]
            self._fit_y(self.speedup_plot, *settled, floor=2.0)

    def _settled(self, column: np.ndarray) -> np.ndarray:
        """The shown rows, less the first SETTLE_ROWS of the run once there are more (their estimates jump)."""
        start = self._from_row if len(column) <= SETTLE_ROWS else max(self._from_row, SETTLE_ROWS)
        return column[start:]

    def _grow_y(self, plot: pg.PlotItem, *values: np.ndarray, floor: float = 1.0) -> None:
        """Show 0 .. a round ceiling above the data; the range only steps up (within a run)."""
        top = _top(values, floor)
        if top > self._y_top.get(id(plot), 0.0):
            self._set_ceiling(plot, _round_up(top))

    def _fit_y(self, plot: pg.PlotItem, *values: np.ndarray, floor: float = 1.0) -> None:
        """Show 0 .. a round ceiling above the data, up or down: an early spike does not hold the range."""
        ceiling = _round_up(_top(values, floor))
        if ceiling != self._y_top.get(id(plot)):
            self._set_ceiling(plot, ceiling)

    def _set_ceiling(self, plot: pg.PlotItem, ceiling: float) -> None:
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

    def _draw_markers(self, index: int) -> None:
        """A vertical line where the drafter, K or rule changed; labelled in the α plot."""
        changes, markers = self._session.changes, self._markers[index]
        for change in changes[len(markers):]:
            label = change.text if index == 0 else None
            marker = pg.InfiniteLine(change.index - 0.5, angle=90, movable=False, label=label,
                                     pen=pg.mkPen("#D55E00", width=1, style=Qt.PenStyle.DashDotLine),
                                     labelOpts={"position": 0.92, "color": "#D55E00", "anchors": [(0, 0), (0, 0)]})
            marker.setToolTip(f"pass {change.index}: {change.text}")
            self._plots[index].addItem(marker)
            markers.append(marker)

    def _draw_drafters(self, first_pass: float) -> None:
        """Each drafter's curves: rolling (solid) and cumulative (dashed), in the drafter's colour."""
        for name, drafter in self._session.by_drafter.items():
            rolling, cumulative = self._curves_for(name)
            passes = drafter.columns["pass"]
            shown = slice(int(np.searchsorted(passes, first_pass)), None)
            rolling.setData(passes[shown], drafter.columns["alpha_roll"][shown], connect="finite")
            cumulative.setData(passes[shown], drafter.columns["alpha_cum"][shown], connect="finite")

    def _curves_for(self, name: str) -> tuple[pg.PlotDataItem, pg.PlotDataItem]:
        if name not in self.drafter_curves:
            colour = DRAFTER_COLOURS[len(self.drafter_curves) % len(DRAFTER_COLOURS)]
            rolling = self.alpha_plot.plot(pen=pg.mkPen(colour, width=2))
            cumulative = self.alpha_plot.plot(pen=pg.mkPen(colour, width=1, style=Qt.PenStyle.DashLine))
            self.drafter_curves[name] = (rolling, cumulative)
            self.alpha_plot.legend_entries.append((colour, SOLID, name))
            self._show_legend(self.alpha_plot, self._alpha_note())
        return self.drafter_curves[name]

    def marker_count(self) -> int:
        """Change markers in each plot (for tests)."""
        counts = {len(markers) for markers in self._markers}
        return counts.pop() if len(counts) == 1 else -1

    def legend_names(self, plot: pg.PlotItem) -> list[str]:
        """The names the legend under `plot` lists (for tests)."""
        return [name for _colour, _glyph, name in plot.legend_entries]

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
        last = self._session.passes[-1] if self._session.passes else None
        asd = last is not None and last.verify == "asd"
        self._show_budget(last.ledger if asd else None)
        self.budget_state = "off" if not asd else "spent" if _budget_spent(last.ledger) else "on"
        self.ledger_note.setVisible(self.budget_state != "on")
        self.ledger_note.setText("ASD off" if not asd else "Budget spent:\nASD is now strict greedy")
        (x0, x1), (y0, y1) = self.ledger_plot.getViewBox().viewRange()
        self.ledger_note.setPos((x0 + x1) / 2, (y0 + y1) / 2)  # the middle of the plot

    def _show_budget(self, ledger) -> None:
        """The gauge: budget left of B, exceptions; 'ASD off' outside ASD; strict greedy once spent."""
        if ledger is None:
            self.budget_gauge.setEnabled(False)
            self.budget_gauge.setValue(0)
            self.budget_note.setText("ASD off")
            return
        left = max(0.0, ledger.budget - ledger.spent)
        self.budget_gauge.setEnabled(True)
        self.budget_gauge.setValue(int(1000 * left / ledger.budget) if ledger.budget > 0 else 0)
        figures = (f"{left:.3g} of B = {ledger.budget:g} left &nbsp;·&nbsp; {ledger.exceptions} "
                   f"exception{'' if ledger.exceptions == 1 else 's'}")
        spent = ("&nbsp;·&nbsp; <span style='color:#c0392b; font-weight:bold'>Budget spent: ASD is now strict "
                 "greedy (no more exceptions)</span>" if _budget_spent(ledger) else "")
        self.budget_note.setText(figures + spent)

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


def _budget_spent(ledger) -> bool:
    return ledger.budget > 0 and ledger.spent >= ledger.budget


def _top(values, floor: float) -> float:
    finite = [v[np.isfinite(v)] for v in values]
    return max([floor] + [float(v.max()) for v in finite if v.size])


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
