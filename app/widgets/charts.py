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
curves, never clipped), and a minimum height. Of the arrangements that show every
plot without scrolling (three to a row, two, or all five in one row, titles and
legends wrapped to their columns: app/widgets/chart_text.py) the grid takes the one
whose plots are largest, so a short dock (1024x700, 1366x768, the Classroom
layout) shows all five in one row; the legends of a row are as tall as each other,
so its plots line up. When none fits, the grid reflows to the dock's width (three,
two or one to a row) and tells its scroll area the arrangement's minimum size, so a
plot is never drawn past the dock's edge: the area scrolls to it instead, sideways
only when not even one plot fits across. A raised tab redraws what arrived while
it was behind (`on_visibility_changed`). Vertical markers show where the drafter, K or rule
changed mid-run (`Session.changes`).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import shiboken6
from PySide6.QtCore import QEvent, QObject, QRect, QRectF, QSize, Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsItem,
    QHBoxLayout,
    QLabel,
    QMenu,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.widgets import on_screen
from app.widgets.chart_export import install_export_menu, save_item_png
from app.widgets.chart_style import font_px as _font_px
from app.widgets.chart_style import style_plot, style_text_item, style_view
from app.widgets.chart_text import legend_html, title_html
from app.widgets.compare import PinnedRun, RunSummaryTable, overlay_pen, summary_of
from app.widgets.run_view import RunView, bound
from app.widgets.theme import NORMAL, Theme, follow_theme, theme_hub
from app.widgets.throttle import MIN_REDRAW_MS, RedrawThrottle

PLOT_COUNT = 5
STAGGER_MS = MIN_REDRAW_MS // PLOT_COUNT  # one plot per turn: each plot is redrawn every MIN_REDRAW_MS
# The x axes grow in these steps, so axis ticks are not re-laid out every tick.
X_STEPS = (50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000)
MAX_BARS = 500  # more passes than this are drawn as bins of consecutive passes (their mean)
LEFT_AXIS_PX = 52  # room for labels such as "10000" with the axis title, at the normal text size
MIN_ROW_PX = 200  # a row of plots (title, plot, axis, legend) never gets less; the grid scrolls instead
MIN_PLOT_PX = 70  # a single row's plots keep this much height beside their text
TITLE_ROW_PX = 30  # pyqtgraph's height of a title's row: a title of one line at the normal size
MAX_PLOT_ASPECT = 0.75  # height / width beyond which a plot's extra height is not worth a row of its own
CELL_SLACK_PX = 6  # a column's text stays this much narrower than the column (rounding, the label's margins)
MIN_DOCK_PX = 200  # the charts never collapse to nothing in a small window
MAX_COLUMNS = 3  # plots to a row when the dock is wide enough; fewer when it is not
SETTLE_ROWS = 8  # the first passes' estimates are noisy: a spike there does not set a y range for good
ALPHA_TOP = 1.08  # the α axis: 0 .. 1 with room above 1.0 so lines near 1 do not run into the frame
ALPHA_TICKS = [[(v / 5, f"{v / 5:.1f}") for v in range(6)]]
LABEL_ROWS = 3  # change labels are staggered on up to this many rows, from the top of the α plot down
ALPHA_BOTTOM = -0.03  # a little room under 0 so the 0.0 tick has its label
LEGEND_LINE_CHARS = 30  # a legend line holds entries up to about this many characters
LABEL_CHARS = 26  # a change label longer than this is elided (its line's tooltip has it whole)
GAUGE_PX = 120  # the ASD budget bar (its figures are in words beside it)
# Line glyphs of the legends, one per pen style
SOLID, DASHED, DOTTED, CROSS = "━━", "╍╍", "┈┈", "✕"



class RunCharts(QWidget):
    sig_text_resized = Signal()  # a legend took more or fewer lines: the height that shows every plot changed
    scroll: QScrollArea  # type: ignore[assignment]  # the grid's scroll area (it hides QWidget.scroll, unused here)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._session: RunView | None = None
        self._from_row = 0  # rows before this were cleared from view
        self._x_spans: dict[int, tuple[float, float]] = {}  # plot index -> its stepped x range
        self._y_top: dict[int, float] = {}  # id(plot) -> top of its stepped y range
        self._turn = 0  # the plot whose turn is next
        self._drawn_rows = [-1] * PLOT_COUNT  # series size each plot last showed
        self._markers: list[list[pg.InfiniteLine]] = [[] for _ in range(PLOT_COUNT)]  # per plot: change markers
        self._theme: Theme = theme_hub().theme
        self._text_scale = 1.0
        self._pass_interval_s = 0.0  # slow motion: the least time between passes shown (0 = full speed)
        self._pinned: list[tuple[PinnedRun, list[pg.PlotDataItem]]] = []  # earlier runs drawn faded
        self._cells: list[pg.GraphicsLayout] = []  # each plot with its legend, in reading order
        self.columns = MAX_COLUMNS  # plots to a row, as laid out now
        self._focus: int | None = None  # one plot shown alone, large (presentation mode), or None for all
        self._laid_out: tuple = (MAX_COLUMNS, None)  # the arrangement in the grid now: (columns, focus)
        self._legend_width: float | None = None  # titles and legends wrap to this many pixels (None: they need not)
        self._reflowing = False
        self._throttle = RedrawThrottle(STAGGER_MS, self._draw_next_plot, self)
        self.layout_widget = pg.GraphicsLayoutWidget()
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
        self.summary = RunSummaryTable()  # one row per finished run, for side-by-side comparison
        self.summary.hide()
        self.compare_button = self._build_compare_menu()
        self.controls_bar = QWidget()  # under the plots: the ASD budget, Compare, Clear charts
        bar = QHBoxLayout(self.controls_bar)
        bar.setContentsMargins(0, 0, 0, 0)
        bar.addWidget(self.budget_title)
        bar.addWidget(self.budget_gauge)
        bar.addWidget(self.budget_note, 1)
        bar.addWidget(self.compare_button)
        bar.addWidget(self.clear_button)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.scroll)
        split.addWidget(self.summary)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)
        column.addWidget(split, 1)
        column.addWidget(self.controls_bar)
        self.setMinimumHeight(MIN_DOCK_PX)
        install_export_menu(self.layout_widget, "charts")
        follow_theme(self, self.apply_theme)

    # --- construction -------------------------------------------------------------
    def _plot(self, title: str, y_label: str, short_title: str | None = None) -> pg.PlotItem:
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
        plot.legend_note = ""
        plot.legend_entries = []  # (colour, glyph, name)
        plot.pinned_entries = []  # the same, for the pinned runs drawn faded
        plot.plain_title = title
        plot.short_title = short_title  # in a narrow column (its legend says the rest)
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
        self.alpha_plot = self._plot("α = accepted / tested, per pass", "α", "α per pass")
        self.alpha_plot.setYRange(ALPHA_BOTTOM, ALPHA_TOP, padding=0)
        self.alpha_plot.getAxis("left").setTicks(ALPHA_TICKS)  # 0.0 .. 1.0, with a 1.0 tick under the headroom
        self.alpha_plot.getAxis("left").setStyle(hideOverlappingLabels=False)  # 0.0 and 1.0 keep their labels
        view = self.alpha_plot.getViewBox()
        view.sigResized.connect(lambda _view: self._while_alive(self._fit_alpha_axis))  # labels keep their size
        view.sigXRangeChanged.connect(lambda *_: self._while_alive(self._stagger_labels))
        self.alpha_plot.setMouseEnabled(x=True, y=False)  # α is a probability: the axis stays 0-1
        overall = self._theme.overall
        self.overall_alpha = self._line(self.alpha_plot, SOLID, "α, all", pen=pg.mkPen(overall, width=2))
        self.acceptance_rate = self._line(self.alpha_plot, DOTTED, "accepted / drafted",
                                          pen=pg.mkPen(overall, width=1, style=Qt.PenStyle.DotLine))
        self.drafter_curves: dict[str, tuple[pg.PlotDataItem, pg.PlotDataItem]] = {}

        self.tokens_plot = self._plot("Tokens per pass vs E(α, K)", "tokens", "Tokens per pass")
        self.tokens_bars = self.tokens_plot.plot(stepMode="center", fillLevel=0, pen=pg.mkPen("#0072B2"),
                                                 brush=pg.mkBrush(0, 114, 178, 90))
        self.tokens_plot.legend_entries.append(("#0072B2", "▇", "committed"))
        self.tokens_theory = self._line(self.tokens_plot, DASHED, "E(α, K); a tree: 1 + Σ P(node)",
                                        pen=pg.mkPen("#D55E00", width=2, style=Qt.PenStyle.DashLine))

        self.ledger_plot = self._plot("ASD regret ledger", "regret", "ASD regret")
        self.ledger_spent = self._line(self.ledger_plot, SOLID, "spent", pen=pg.mkPen("#CC79A7", width=2))
        self.ledger_budget = self._line(self.ledger_plot, DASHED, "budget B",
                                        pen=pg.mkPen("#999999", width=1, style=Qt.PenStyle.DashLine))
        self.ledger_marks = pg.ScatterPlotItem(symbol="x", size=9, pen=pg.mkPen("#D55E00"), brush=None)
        self.ledger_plot.addItem(self.ledger_marks)
        self.ledger_plot.legend_entries.append(("#D55E00", CROSS, "exception"))
        self.ledger_note = pg.TextItem("ASD off", anchor=(0.5, 0.5))
        self.ledger_plot.getViewBox().addItem(self.ledger_note, ignoreBounds=True)

        self.speed_plot = self._plot("Throughput (compute speed)", "tokens/s", "Throughput")
        self.tokens_per_s = self._line(self.speed_plot, SOLID, "tokens/s", pen=pg.mkPen("#009E73", width=2))

        self.speedup_plot = self._plot("Speedup: estimated vs predicted", "×", "Speedup")
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

    def _build_compare_menu(self) -> QToolButton:
        """One small button (the bar stays narrow): pin this run, unpin all, show the table of runs."""
        menu = QMenu(self)
        self.pin_action = menu.addAction("Pin this run (keep it faded under the next runs)", self.pin_current)
        self.unpin_action = menu.addAction("Unpin all", self.unpin_all)
        self.summary_action = menu.addAction("Show the table of runs")
        self.summary_action.setCheckable(True)
        self.summary_action.toggled.connect(self.summary.setVisible)
        button = QToolButton()
        button.setText("Compare")
        button.setToolTip("Pin runs to the charts and show finished runs side by side: α, acceptance rate, tokens "
                          "per pass against E(α, K), c, v and the estimated speedup")
        button.setMenu(menu)
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.unpin_action.setEnabled(False)
        return button

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
    def _show_legend(self, plot: pg.PlotItem, note: str | None = None) -> None:
        """The plot's entries as a compact table of text under it, two or three to a line and no wider than its
        column: each line's glyph in its colour, the names in the theme's text colour."""
        if note is not None:
            plot.legend_note = note
        lines = plot.legend_label.item.toHtml().count("<br")
        self._write_legend(plot)
        resized = plot.legend_label.item.toHtml().count("<br") != lines
        if resized:
            self.sig_text_resized.emit()
        # A legend of more or fewer lines, or a wider one where the text is not wrapped to its column, may need
        # another arrangement (a new figure in a note every pass in slow motion does not)
        if len(self._cells) == PLOT_COUNT and not self._reflowing and (resized or self._legend_width is None):
            self._reflow()

    def _write_legend(self, plot: pg.PlotItem) -> None:
        width = self._legend_width if self._legend_width is not None else float("inf")
        notes = [part for part in plot.legend_note.split("\n") if part]
        text = legend_html(plot.legend_entries + plot.pinned_entries, notes, self._theme.chart_px, width,
                           LEGEND_LINE_CHARS)
        plot.legend_label.setText(text, size=f"{self._theme.chart_px}px", color=self._theme.text)

    def _write_title(self, plot: pg.PlotItem) -> None:
        """The title in as many lines as its column needs, its row as tall as they are (pyqtgraph gives a
        title one 30 px row, which would clip a second line or a projector's larger text)."""
        axis = plot.getAxis("left").width() + CELL_SLACK_PX
        width = None if self._legend_width is None else self._legend_width - axis
        plot.setTitle(title_html(plot.plain_title, self._theme.title_px, width, plot.short_title),
                      color=self._theme.text, size=f"{self._theme.title_px}px")  # the axes are not styled again
        height = max(TITLE_ROW_PX, int(np.ceil(plot.titleLabel.item.boundingRect().height())))
        plot.titleLabel.setMaximumHeight(height)
        plot.layout.setRowFixedHeight(0, height)

    def _wrap_text(self, width: float | None) -> None:
        """Titles and legends no wider than `width` pixels (a column of the grid), or on as few lines as they
        like (None)."""
        if width == self._legend_width:
            return
        self._legend_width = width
        for plot in self._plots:
            self._write_title(plot)
            self._write_legend(plot)

    def set_text_scale(self, scale: float) -> None:
        """Titles, axes and legends at `scale` times the normal size (the Classroom layout): every chart
        follows, through the theme."""
        theme_hub().set_text_scale(scale)

    def apply_theme(self, theme: Theme) -> None:
        """Background, titles, axes, ticks and legends in the theme's colours and sizes (normal or presentation)."""
        self._theme = theme
        self._text_scale = theme.chart_px / NORMAL.chart_px
        style_view(self.layout_widget, theme)
        self._restyle_lines(theme)
        for plot in self._plots:
            style_plot(plot, theme)
            plot.getAxis("left").setWidth(int(LEFT_AXIS_PX * max(1.0, self._text_scale)))
            self._write_title(plot)
            self._show_legend(plot)
        style_text_item(self.ledger_note, theme)
        for index, markers in enumerate(self._markers):
            for marker in markers:
                self._plots[index].removeItem(marker)
            markers.clear()
        self._drawn_rows = [-1] * PLOT_COUNT
        self._reflow()
        self.request_refresh()

    def _restyle_lines(self, theme: Theme) -> None:
        """Line widths follow the theme (thicker on a projector); a drafter's α lines keep its colour."""
        width = theme.line_px
        self.overall_alpha.setPen(pg.mkPen(theme.overall, width=width))
        self.acceptance_rate.setPen(pg.mkPen(theme.overall, width=1, style=Qt.PenStyle.DotLine))
        self.alpha_plot.legend_entries[:2] = [(theme.overall, SOLID, "α, all"), (theme.overall, DOTTED,
                                                                                  "accepted / drafted")]
        for curve in (self.tokens_per_s, self.speedup_estimated, self.ledger_spent):
            pen = curve.opts["pen"]
            curve.setPen(pg.mkPen(pg.mkPen(pen).color(), width=width))
        for name, (rolling, cumulative) in self.drafter_curves.items():
            rolling.setPen(_rolling_pen(theme, name))
            cumulative.setPen(_cumulative_pen(theme, name))

    # --- reflowing the grid -----------------------------------------------------------
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.scroll and event.type() == QEvent.Type.Resize:
            self._reflow()
        return super().eventFilter(watched, event)

    def grid_minimum(self, columns: int) -> QSize:
        """The smallest size of the grid with `columns` plots to a row: every plot and legend at its minimum
        size, with the grid's spacing and margins; each row at least MIN_ROW_PX (scaled) when there are several,
        a single row its text and MIN_PLOT_PX (scaled) of plot."""
        grid = self.layout_widget.ci.layout
        minimum = [cell.effectiveSizeHint(Qt.SizeHint.MinimumSize) for cell in self._laid()]
        columns = min(columns, len(minimum))
        rows = -(-len(minimum) // columns)
        widths = [max(size.width() for size in minimum[col::columns]) for col in range(columns)]
        heights = [max(size.height() for size in minimum[row * columns:(row + 1) * columns]) for row in range(rows)]
        left, top, right, bottom = grid.getContentsMargins()
        width = sum(widths) + grid.horizontalSpacing() * (columns - 1) + left + right
        floor = MIN_ROW_PX * self._text_scale if rows > 1 else heights[0] + MIN_PLOT_PX * self._text_scale
        height = max(sum(heights) + grid.verticalSpacing() * (rows - 1) + top + bottom, rows * floor)
        frame = 2 * self.layout_widget.frameWidth()
        return QSize(int(np.ceil(width)) + frame, int(np.ceil(height)) + frame)

    def _tallest_legend(self) -> float:
        return max(cell.getItem(1, 0).effectiveSizeHint(Qt.SizeHint.MinimumSize).height() for cell in self._laid())

    def _plot_area(self, columns: int, room: QSize) -> float:
        """About the area (px²) each plot gets when `columns` to a row share `room`, beside its text and axes,
        counting no more height than MAX_PLOT_ASPECT of its width (a tall thin plot reads no better)."""
        minimum = [cell.effectiveSizeHint(Qt.SizeHint.MinimumSize).height() for cell in self._laid()]
        rows = -(-len(minimum) // columns)
        text = sum(max(minimum[row * columns:(row + 1) * columns]) for row in range(rows))
        height = (room.height() - text) / rows
        width = room.width() / columns - self._plots[0].getAxis("left").width()
        return max(min(height, MAX_PLOT_ASPECT * width), 0.0) * max(width, 0.0)

    def _fit_text(self, columns: int | None, room: int) -> None:
        """Titles and legends wrapped to the columns of `columns` to a row (None: on as few lines as they like);
        in a single row the x axes' title ("pass", which every plot shares and the titles say) is left out."""
        self._wrap_text(None if columns is None else self._column_width(columns, room))
        single_row = columns is not None and columns == len(self._laid()) > 1
        for plot in self._plots:
            axis = plot.getAxis("bottom")
            if axis.label.isVisible() == single_row:
                axis.showLabel(not single_row)

    def height_to_fit(self) -> int:
        """The height this widget needs to show every plot without scrolling, all of them in one row at its
        present width (the Classroom layout sizes the charts' dock with it)."""
        laid = len(self._laid())
        self._fit_text(laid, self.scroll.contentsRect().width())
        need = self.grid_minimum(laid).height()
        self._laid_out = ()  # measured in another arrangement: lay out again
        self._reflow()
        return need + self.height() - self.scroll.contentsRect().height()

    def _column_width(self, columns: int, room: int) -> float:
        """The width of one column when `columns` share `room` pixels of the scroll area."""
        grid = self.layout_widget.ci.layout
        left, _top, right, _bottom = grid.getContentsMargins()
        spare = room - 2 * self.layout_widget.frameWidth() - left - right - grid.horizontalSpacing() * (columns - 1)
        return spare / columns - CELL_SLACK_PX

    def _fitting_columns(self) -> int:
        """The arrangement that shows every plot without scrolling, text wrapped to its column, with the largest
        plots: three to a row, two, or all in one row (a short dock: 1366x768, 1024x700, the Classroom layout).
        When none fits: all in one row if their plots (not their legends) fit the height; else the most plots to a
        row (up to MAX_COLUMNS) that fit across the scroll area with their text on few lines, less its vertical
        scroll bar (one when not even one fits: then it scrolls sideways)."""
        room = self.scroll.contentsRect().size()
        laid = len(self._laid())
        self._even_legends(1)  # each cell measured at its own size
        if laid == 1:
            self._fit_text(None, room.width())
            return 1
        fitting = {}  # columns -> the area each plot would get
        for columns in dict.fromkeys((min(MAX_COLUMNS, laid), 2, laid)):
            self._fit_text(columns, room.width())
            need = self.grid_minimum(columns)
            if need.width() <= room.width() and need.height() <= room.height():
                fitting[columns] = self._plot_area(columns, room)
        if fitting:
            best = max(fitting, key=fitting.__getitem__)
            self._fit_text(best, room.width())
            return best
        bar = self.scroll.verticalScrollBar().sizeHint().width()
        self._fit_text(laid, room.width() - bar)
        need = self.grid_minimum(laid)
        if need.width() <= room.width() - bar and need.height() - self._tallest_legend() <= room.height():
            return laid  # every plot in view in one row, their legends a scroll away
        self._fit_text(None, room.width())
        for wanted in range(min(MAX_COLUMNS, laid), 1, -1):
            need = self.grid_minimum(wanted)
            if need.width() <= room.width() - (bar if need.height() > room.height() else 0):
                return wanted
        return 1

    def _even_legends(self, columns: int) -> None:
        """Every legend's row as tall as the tallest legend in its row of the grid, so a row's plots line up."""
        laid = self._laid()
        heights = [cell.getItem(1, 0).effectiveSizeHint(Qt.SizeHint.MinimumSize).height() for cell in laid]
        for index, cell in enumerate(laid):
            start = index - index % columns
            cell.layout.setRowMinimumHeight(1, max(heights[start:start + columns]) if columns > 1 else 0)

    @property
    def plots(self) -> tuple[pg.PlotItem, ...]:
        return self._plots

    def _reflow(self) -> None:
        """Lay the plots out in as many columns as fit, in reading order, and give the scroll area the
        arrangement's minimum size: it scrolls to what does not fit rather than the grid being squeezed."""
        self._reflowing = True
        try:
            columns = self._fitting_columns()
        finally:
            self._reflowing = False
        if (columns, self._focus) != self._laid_out:
            self.columns = columns
            self._laid_out = (columns, self._focus)
            layout = self.layout_widget.ci
            grid = layout.layout
            for cell in list(layout.items):
                grid.removeAt(next(i for i in range(grid.count()) if grid.itemAt(i) is cell))
            layout.rows, layout.items = {}, {}
            laid = self._laid()
            for cell in self._cells:
                cell.setVisible(cell in laid)
            for index, cell in enumerate(laid):
                row, col = divmod(index, columns)
                grid.addItem(cell, row, col)
                layout.rows.setdefault(row, {})[col] = cell
                layout.items[cell] = [(row, col)]
        self._even_legends(self.columns)
        minimum = self.grid_minimum(self.columns)
        if minimum != self.layout_widget.minimumSize():
            self.layout_widget.setMinimumSize(minimum)

    def _laid(self) -> list[pg.GraphicsLayout]:
        """The cells in the grid: all of them, or the focused plot alone."""
        return self._cells if self._focus is None else [self._cells[self._focus]]

    def focus_plot(self, index: int | None) -> None:
        """Show plot `index` (0 α, 1 tokens per pass, 2 ASD ledger, 3 throughput, 4 speedup) alone, filling the
        charts (presentation mode: one large chart at a time); None shows them all again."""
        self._focus = None if index is None else index % PLOT_COUNT
        self._reflow()
        self.refresh()

    @property
    def focused_plot(self) -> int | None:
        return self._focus

    def plot_titles(self) -> list[str]:
        """The plots' titles in reading order (the index `focus_plot` takes)."""
        return [plot.plain_title for plot in self._plots]

    def cell_rects(self) -> list[QRect]:
        """Each plot with its title, axes and legend, in the grid widget's pixels (for layout tests)."""
        view = self.layout_widget
        return [view.mapFromScene(QRectF(cell.sceneBoundingRect())).boundingRect() for cell in self._cells]

    def plot_cells(self) -> list[tuple[int, int]]:
        """(row, column) of each plot in the grid, in reading order (for tests)."""
        return [self.layout_widget.ci.items[cell][0] for cell in self._cells]

    def _alpha_note(self) -> str:
        return "drafters: thin = last 16 passes,\ndashed = all so far" if self.drafter_curves else ""

    # --- binding ------------------------------------------------------------------
    def set_session(self, session: RunView) -> None:
        self._session = session
        self.summary.set_session(session)
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
        self._show_legend(self.alpha_plot, "")
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
        series = bound(self._session).series
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
            self._note_shown_pace()
            self._fit_y(self.speed_plot, self._settled(series["tokens_per_s"]),
                        *[run.tokens_per_s for run, _lines in self._pinned])
        else:
            estimated, predicted = series["speedup_estimated"][rows], series["speedup_predicted"][rows]
            with_verify = series["speedup_predicted_verify"][rows]
            self.speedup_estimated.setData(x, estimated, connect="finite")
            self.speedup_predicted.setData(x, predicted, connect="finite")
            self.speedup_predicted_verify.setData(x, with_verify, connect="finite")
            settled = [self._settled(series[name]) for name in
                       ("speedup_estimated", "speedup_predicted", "speedup_predicted_verify")]
            self._fit_y(self.speedup_plot, *settled, *[run.speedup for run, _lines in self._pinned], floor=2.0)

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
        if self._pinned and self._from_row == 0:  # a pinned run stays whole beside the live one
            last = max([last] + [float(run.passes[-1]) for run, _lines in self._pinned])
        width = next((step for step in X_STEPS if step > last - first), last - first + 1)
        span = (first - 0.5, first + width + 0.5)
        if span != self._x_spans.get(index):
            self._x_spans[index] = span
            self._plots[index].setXRange(*span, padding=0)

    def _draw_markers(self, index: int) -> None:
        """A vertical line where the drafter, K or rule changed; labelled in the α plot, the labels staggered."""
        changes, markers = bound(self._session).changes, self._markers[index]
        for change in changes[len(markers):]:
            label = _elide(change.text, LABEL_CHARS) if index == 0 else None
            marker = pg.InfiniteLine(change.index - 0.5, angle=90, movable=False, label=label,
                                     pen=pg.mkPen(self._theme.marker, width=1, style=Qt.PenStyle.DashDotLine),
                                     labelOpts={"position": 0.98, "color": self._theme.marker,
                                                "anchors": [(0, 0), (0, 0)]})
            if label is not None:
                marker.label.setFont(_font_px(self._theme.chart_px))
            marker.setToolTip(f"pass {change.index}: {change.text}")
            self._plots[index].addItem(marker)
            markers.append(marker)
        if index == 0:
            self._stagger_labels()

    def _while_alive(self, act) -> None:
        """Run `act` unless the widget is being taken down (its plots can outlive its scroll area by a moment)."""
        if shiboken6.isValid(self) and shiboken6.isValid(self.scroll):
            act()

    def _fit_alpha_axis(self) -> None:
        """0 .. 1 with room for the 0.0 and 1.0 tick labels at any plot height (the axis clips a label that
        reaches past the plot), and ALPHA_TOP at least above 1.0; then the change labels are laid out again."""
        height = max(self.alpha_plot.getViewBox().height(), 1.0)
        half_label = (self._theme.chart_px / 2 + 2) / height  # of the plot's height
        bottom = min(ALPHA_BOTTOM, -1.2 * half_label)
        top = max(ALPHA_TOP, 1.0 + 1.2 * half_label)
        if (bottom, top) != tuple(self.alpha_plot.viewRange()[1]):
            self.alpha_plot.setYRange(bottom, top, padding=0)
        self._stagger_labels()

    def _stagger_labels(self) -> None:
        """Put each change label on the highest row where it clears the label before it; a label that fits on
        no row is hidden (its line keeps the tooltip) and the legend says how many are."""
        markers = [m for m in self._markers[0] if getattr(m, "label", None) is not None]
        view = self.alpha_plot.getViewBox()
        (x0, x1), _ = view.viewRange()
        px_per_pass = max(view.width(), 1.0) / max(x1 - x0, 1e-9)
        line_px = (markers[0].label.boundingRect().height() if markers else 0) + 1
        rows = max(1, min(LABEL_ROWS, int(0.6 * view.height() // max(line_px, 1))))  # the upper part of the plot
        row_ends = [-np.inf] * rows  # right edge (pixels) of the last label on each row
        hidden = 0
        for marker in markers:
            left = (marker.value() - x0) * px_per_pass
            width = marker.label.boundingRect().width() + 6
            row = next((r for r, end in enumerate(row_ends) if left >= end), None)
            marker.label.setVisible(row is not None and x0 <= marker.value() <= x1)
            if row is None:
                hidden += 1
                continue
            row_ends[row] = left + width
            marker.label.setPosition(1.0 - (2 + row * line_px) / max(view.height(), 1.0))
        note = self._alpha_note()
        if hidden:
            plural = "s" if hidden > 1 else ""
            note += f"\n{hidden} change label{plural} hidden: hover the lines"
        if note != self.alpha_plot.legend_note:
            self._show_legend(self.alpha_plot, note)

    def _draw_drafters(self, first_pass: float) -> None:
        """Each drafter's curves: rolling (solid) and cumulative (dashed), in the drafter's colour."""
        for name, drafter in bound(self._session).by_drafter.items():
            rolling, cumulative = self._curves_for(name)
            passes = drafter.columns["pass"]
            shown = slice(int(np.searchsorted(passes, first_pass)), None)
            rolling.setData(passes[shown], drafter.columns["alpha_roll"][shown], connect="finite")
            cumulative.setData(passes[shown], drafter.columns["alpha_cum"][shown], connect="finite")

    def _curves_for(self, name: str) -> tuple[pg.PlotDataItem, pg.PlotDataItem]:
        """A drafter's α lines in its own colour (the same in every run): the rolling one thin and light, the
        cumulative one heavy and long-dashed above it, so the two read apart."""
        if name not in self.drafter_curves:
            rolling = self.alpha_plot.plot(pen=_rolling_pen(self._theme, name))
            cumulative = self.alpha_plot.plot(pen=_cumulative_pen(self._theme, name))
            cumulative.setZValue(rolling.zValue() + 1)
            self.drafter_curves[name] = (rolling, cumulative)
            self.alpha_plot.legend_entries.append((self._theme.drafter_colour(name), SOLID, name))
            self._show_legend(self.alpha_plot, self._alpha_note())
        return self.drafter_curves[name]

    def drafter_colours(self) -> dict[str, str]:
        """Each drafter's α line colour as drawn now (for tests)."""
        return {name: rolling.opts["pen"].color().name() for name, (rolling, _cum) in self.drafter_curves.items()}

    def text_plots(self) -> list[pg.PlotItem]:
        """The plots whose text the theme colours (for the contrast test)."""
        return list(self._plots)

    def change_markers(self) -> list[pg.InfiniteLine]:
        """The α plot's change markers, each with its label (for tests)."""
        return list(self._markers[0])

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
        new_exception = np.flatnonzero(np.diff(exceptions, prepend=0.0) > 0) if len(x) else np.array([], dtype=int)
        self.ledger_marks.setData(x[new_exception], spent[new_exception])
        self._grow_y(self.ledger_plot, spent, budget)
        passes = bound(self._session).passes
        last = passes[-1] if passes else None
        ledger = last.ledger if last is not None and last.verify == "asd" else None
        self._show_budget(ledger)
        self.budget_state = "off" if ledger is None else "spent" if _budget_spent(ledger) else "on"
        self.ledger_note.setVisible(self.budget_state != "on")
        self.ledger_note.setText("ASD off" if ledger is None else "Budget spent:\nASD is now strict greedy")
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
        """Every plot with its legend, as on screen, at twice the screen's pixels."""
        save_item_png(self.layout_widget.ci, path)

    # --- slow motion ------------------------------------------------------------------
    def set_pass_interval(self, seconds: float) -> None:
        """Slow motion (at least `seconds` between passes shown; 0 = full speed): the Throughput chart says
        that its curve is the engine's compute speed and what pace the class sees."""
        self._pass_interval_s = seconds
        self._note_shown_pace()

    def _note_shown_pace(self) -> None:
        stats = self._session.stats if self._session is not None else None
        note = ""
        if self._pass_interval_s > 0:
            rate = 1.0 / self._pass_interval_s
            note = f"Slow motion ({rate:g} passes/s): the curve is the engine's compute speed"
            if stats is not None and stats.tokens_per_pass:
                shown = min(stats.tokens_per_s, stats.tokens_per_pass * rate)
                note += f";\nabout {shown:.3g} tokens/s appear on screen"
        if note != self.speed_plot.legend_note:
            self._show_legend(self.speed_plot, note)

    # --- compare runs -----------------------------------------------------------------
    def pin_current(self) -> PinnedRun | None:
        """Keep the session's run on the charts, faded, under the runs that follow (None before a pass)."""
        if self._session is None:
            return None
        run = summary_of(self._session, len(self._pinned) + 1)
        if run is None:
            return None
        run = PinnedRun(**{**run.__dict__, "label": "pinned " + run.label.split(" · ", 1)[-1]})
        self._pinned.append((run, self._overlay(run)))
        self._enable_pin_buttons()
        self.refresh()
        return run

    def _overlay(self, run: PinnedRun) -> list[pg.PlotDataItem]:
        """The run's α (per drafter, cumulative), tokens per pass, tokens/s and estimated speedup, faded."""
        theme = self._theme
        colour = theme.drafter_colour(run.drafter)
        lines = []
        alphas = run.alpha_by_drafter or {run.drafter or "": (run.passes, run.alpha)}
        for name, (passes, alpha) in alphas.items():
            lines.append(self._faded(self.alpha_plot, passes, alpha, overlay_pen(theme.drafter_colour(name), theme)))
        for plot, values in ((self.tokens_plot, run.tokens_per_pass), (self.speed_plot, run.tokens_per_s),
                             (self.speedup_plot, run.speedup)):
            lines.append(self._faded(plot, run.passes, values, overlay_pen(colour, theme)))
        for plot in (self.alpha_plot, self.tokens_plot, self.speed_plot, self.speedup_plot):
            plot.pinned_entries.append((colour, DOTTED, run.label))
            self._show_legend(plot)
        return lines

    @staticmethod
    def _faded(plot: pg.PlotItem, x: np.ndarray, y: np.ndarray, pen) -> pg.PlotDataItem:
        line = pg.PlotDataItem(x, y, pen=pen, connect="finite")
        line.setZValue(-10)  # under the live run
        plot.addItem(line)
        return line

    def unpin_all(self) -> None:
        for _run, lines in self._pinned:
            for line in lines:
                if line.getViewBox() is not None:
                    line.getViewBox().removeItem(line)
        self._pinned.clear()
        for plot in self._plots:
            plot.pinned_entries.clear()
            self._show_legend(plot)
        self._enable_pin_buttons()
        self._x_spans.clear()
        self.refresh()

    def pinned_runs(self) -> list[PinnedRun]:
        return [run for run, _lines in self._pinned]

    def overlay_count(self, plot: pg.PlotItem) -> int:
        """Pinned lines drawn in `plot` (for tests)."""
        return sum(1 for _run, lines in self._pinned for line in lines if line.getViewBox() is plot.getViewBox())

    def _enable_pin_buttons(self) -> None:
        self.unpin_action.setEnabled(bool(self._pinned))

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


def _rolling_pen(theme: Theme, name: str):
    """A drafter's rolling α: thin and a little transparent (it is the noisy one)."""
    colour = pg.mkColor(theme.drafter_colour(name))
    colour.setAlphaF(0.7)
    return pg.mkPen(colour, width=max(1.0, theme.line_px * 0.6))


def _cumulative_pen(theme: Theme, name: str):
    """A drafter's cumulative α: heavier, long dashes, so it never reads as the rolling line."""
    pen = pg.mkPen(theme.drafter_colour(name), width=theme.line_px * 1.25)
    pen.setDashPattern([5, 2.5])
    return pen


def _elide(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars - 1] + "…"
