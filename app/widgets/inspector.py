"""Pass inspector: everything one verification pass decided, and why, from its PassEvent.

At the top: previous / next pass buttons, the pass header and the draft
block as a row of coloured tokens. On the left a table with one row per
drafted position (the verdict, then p(x), q(x) and the target's argmax; under
sampling also p/q, min(1, p/q) and u, under ASD the checks with the suffix
value v_i = K − i) and a last row for the token the target appended; under
it, for the selected row under sampling, a 0–1 strip with min(1, p/q)
marked and u as a dot (kept iff the dot lies left of the mark), the ASD
ledger and a plain-language paragraph (`app.teaching.explain`). On the right
bars of the top of p (target) and q (drafter) at the selected row with the
drafted token outlined, and at the first rejection under sampling the
residual norm(max(0, p - q)) in which the sampled replacement always has a
bar of its own (outlined).

A pass that verified a token tree shows the tree above the table
(`app.widgets.tree_view`): every node, the accepted path and the appended
token. The table's rows are then the tree's main line (the path, then the
first rejected child at its end); selecting a row outlines its node, and
clicking a node of the main line selects its row.

Every number comes from the event (see `app.teaching.explain.inspect_pass`);
cells keep the exact float in `VALUE_ROLE` so tests can compare them.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QPainter, QPen, QTextCharFormat
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.engine.events import AppendedToken, PassEvent, TokenProb
from app.teaching.explain import (
    AsdCheck,
    PassInspection,
    PositionView,
    explain_pass,
    inspect_pass,
    residual_bars,
)
from app.widgets import scrolled
from app.widgets import token_style as ts
from app.widgets.chart_export import install_widget_export_menu
from app.widgets.chart_style import style_plot, style_text_item
from app.widgets.run_view import RunView
from app.widgets.theme import Theme, follow_theme
from app.widgets.token_style import number_text, token_label
from app.widgets.tree_view import APPENDED, TreeView, main_line

VALUE_ROLE = Qt.ItemDataRole.UserRole
P_COLOUR = "#0072B2"  # target
Q_COLOUR = "#E69F00"  # drafter
R_COLOUR = "#009E73"  # residual
HIGHLIGHT_PEN = pg.mkPen("#000000", width=2.5)
# the verdict right after the token, then the numbers behind it: the verdict stays in view in a narrow dock
# (1024x700) where the sampling or ASD columns scroll sideways
COLUMNS = ("#", "token", "verdict", "p(x)", "q(x)", "p/q", "min(1, p/q)", "u", "argmax", "regret r",
           "v_i = K−i", "r / v_i vs g", "mism. vs M", "C_i vs rem")
(COL_POS, COL_TOKEN, COL_VERDICT, COL_P, COL_Q, COL_RATIO, COL_ACCEPT, COL_U, COL_TARGET, COL_REGRET, COL_SUFFIX,
 COL_GATE, COL_CAP, COL_COST) = range(len(COLUMNS))
COLUMN_TIPS = {
    COL_VERDICT: "What the verification did with this drafted token",
    COL_P: "p(x): the target's probability of the drafted token",
    COL_Q: "q(x): the drafter's probability of the drafted token",
    COL_ACCEPT: "The chance of keeping the draft under sampling: kept iff u ≤ min(1, p/q)",
    COL_U: "The uniform draw of the sampling test",
    COL_TARGET: "The target's argmax at this position (✓: the drafted token)",
    COL_REGRET: "ASD regret: the target's top logit minus the drafted token's logit",
    COL_SUFFIX: "ASD suffix value v_i = K − i: the drafts from this position on",
    COL_GATE: "ASD gate: a mismatch is kept only if r / v_i ≤ g",
    COL_CAP: "ASD cap: the block's mismatches so far against M",
    COL_COST: "ASD budget: the block's regret so far against rem = B − s at the block's start",
}
SAMPLING_ONLY = (COL_RATIO, COL_ACCEPT, COL_U)  # under greedy / ASD, p/q decides nothing
ASD_ONLY = (COL_REGRET, COL_SUFFIX, COL_GATE, COL_CAP, COL_COST)
OTHERS = "others"  # the residual mass of every token without a bar (short: a long tick label is dropped)


class BarChart(pg.PlotWidget):
    """Grouped bars over a few tokens; one BarGraphItem per series, reused on every update.

    The key is in the title (never over the bars); the y axis leaves headroom above the tallest bar. With
    `open_last`, the last group (the residual's "others") does not set the range: a bar taller than the range
    is cut at the top and its value written there, so the tokens' own bars stay readable."""

    HEADROOM = 1.15
    MIN_PLOT_PX = 110  # both charts fit a 1024x700 window's dock whole: the token axis never scrolls away

    def __init__(self, title: str, names: tuple[str, ...], colours: tuple[str, ...], parent=None,
                 open_last: bool = False) -> None:
        super().__init__(parent=parent)
        self.setMinimumHeight(self.MIN_PLOT_PX)
        self.plain_title = title
        self.open_last = open_last
        self.getPlotItem().setMouseEnabled(x=False, y=False)
        self.getPlotItem().setMenuEnabled(False)  # its right-click menu saves the figure instead
        self.getAxis("bottom").setStyle(hideOverlappingLabels=False)
        self.width_each = 0.8 / len(names)
        self.series = {name: pg.BarGraphItem(x=[], height=[], width=self.width_each, brush=colour, name=name)
                       for name, colour in zip(names, colours, strict=False)}
        self.colours = dict(zip(names, colours, strict=False))
        for item in self.series.values():
            self.addItem(item)
        self.cut_label = pg.TextItem("", anchor=(0.5, 0.0))
        self.addItem(self.cut_label, ignoreBounds=True)
        install_widget_export_menu(self, "inspector-bars")
        follow_theme(self, self.apply_theme)

    def apply_theme(self, theme: Theme) -> None:
        self.setBackground(theme.background)
        key = "&nbsp;&nbsp;".join(f"<span style='color:{colour}'>▇</span>&nbsp;{html.escape(name)}"
                                  for name, colour in self.colours.items())
        style_plot(self.getPlotItem(), theme, f"{html.escape(self.plain_title)}&nbsp;&nbsp;&nbsp;{key}")
        self.getPlotItem().showGrid(x=False, y=True, alpha=theme.grid_alpha)
        style_text_item(self.cut_label, theme)

    def show_bars(self, labels: list[str], values: dict[str, list[float]], highlight: int | None) -> None:
        x = np.arange(len(labels), dtype=float)
        for slot, (name, item) in enumerate(self.series.items()):
            heights = np.asarray(values.get(name, [math.nan] * len(labels)), dtype=float)
            shown = ~np.isnan(heights)  # unknown values (outside a stored top) get no bar rather than a zero
            offset = (slot - (len(self.series) - 1) / 2) * self.width_each
            # pyqtgraph 0.14 fails on an empty `pens` list, so no bars means no per-bar pens
            pens = [HIGHLIGHT_PEN if i == highlight else pg.mkPen(None) for i in np.flatnonzero(shown)] or None
            item.setOpts(x=x[shown] + offset, height=heights[shown], width=self.width_each,
                         brush=self.colours[name], pens=pens)
        self.getAxis("bottom").setTicks([list(zip(x.tolist(), labels, strict=True))])
        self.setXRange(-0.6, max(len(labels), 1) - 0.4, padding=0)
        ranged = len(labels) - 1 if self.open_last and len(labels) > 1 else len(labels)
        tallest = max((v for vs in values.values() for v in vs[:ranged] if not math.isnan(v)), default=1.0)
        top = max(tallest, 0.02) * self.HEADROOM  # small probabilities stay readable
        self.setYRange(0, top, padding=0)
        self._mark_cut(labels, values, top)

    def _mark_cut(self, labels: list[str], values: dict[str, list[float]], top: float) -> None:
        """Write the value of the last group's bar when it is taller than the range (cut at the top)."""
        last = [v for vs in values.values() for v in vs[-1:] if not math.isnan(v)] if labels else []
        cut = self.open_last and bool(last) and max(last) > top
        self.cut_label.setVisible(cut)
        if cut:
            self.cut_label.setText(f"{max(last):.2f} ↑")
            self.cut_label.setPos(len(labels) - 1, top)

    def heights(self, name: str) -> list[float]:
        """Bar heights drawn for one series (for tests)."""
        height = self.series[name].opts.get("height")
        return [] if height is None else [float(h) for h in height]

    def labels(self) -> list[str]:
        """The tick labels under the bars, left to right (for tests)."""
        ticks = self.getAxis("bottom")._tickLevels  # noqa: SLF001 - pyqtgraph keeps set ticks only here
        return [label for _x, label in ticks[0]] if ticks else []


class AcceptStrip(QWidget):
    """The sampling test of one draft on [0, 1]: kept iff u <= min(1, p/q).

    The interval left of the mark min(1, p/q) is the "keep" region; u is drawn as a dot. The mark's label sits
    above the bar, the 0 and 1 ticks and u's label under it; each label is kept inside the strip and u's label
    between the ticks, so no two labels overlap at any width or text size (`label_rects`).
    """

    MARGIN = 14
    BAR_PX = 10.0
    GAP_PX = 6.0  # between u's label and a tick

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.accept: float | None = None
        self.u: float | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._fit_height()

    def _fit_height(self) -> None:
        """A line of text above the bar and one under it, at the strip's font."""
        line = self.fontMetrics().height()
        self.setFixedHeight(int(2 * line + self.BAR_PX + 12))

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._fit_height()

    def set_values(self, accept: float | None, u: float | None) -> None:
        self.accept, self.u = accept, u
        self.setVisible(accept is not None)
        self.update()

    def _x(self, value: float) -> float:
        return self.MARGIN + value * (self.width() - 2 * self.MARGIN)

    def _bar_top(self) -> float:
        return self.fontMetrics().height() + 4.0

    def label_rects(self) -> dict[str, QRectF]:
        """Where each label is drawn: 'mark' (min(1, p/q)), 'tick 0', 'tick 1' and 'u' (when u is known)."""
        if self.accept is None:
            return {}
        metrics = self.fontMetrics()
        line = float(metrics.height())
        top = self._bar_top()
        under = top + self.BAR_PX + 2
        mark = self._mark_text(self.accept)
        width = metrics.horizontalAdvance(mark) + 2.0
        left = _clamped(self._x(self.accept) - width / 2, width, 0.0, float(self.width()))
        rects = {"mark": QRectF(left, 0, width, line)}
        zero, one = (metrics.horizontalAdvance(t) + 2.0 for t in ("0", "1"))
        rects["tick 0"] = QRectF(self._x(0), under, zero, line)
        rects["tick 1"] = QRectF(self._x(1) - one, under, one, line)
        if self.u is not None:
            text = self._u_text(self.u, self.accept)
            width = metrics.horizontalAdvance(text) + 2.0
            low = rects["tick 0"].right() + self.GAP_PX
            high = rects["tick 1"].left() - self.GAP_PX
            if high - low < width:  # too narrow for the ticks beside it: u's label has the width alone
                del rects["tick 0"], rects["tick 1"]
                low, high = 0.0, float(self.width())
            rects["u"] = QRectF(_clamped(self._x(self.u) - width / 2, width, low, high), under, width, line)
        return rects

    @staticmethod
    def _mark_text(accept: float) -> str:
        return f"min(1, p/q) = {accept:.3g}"

    @staticmethod
    def _u_text(u: float, accept: float) -> str:
        return f"u = {u:.3g} → {'kept' if u <= accept else 'rejected'}"

    def paintEvent(self, event) -> None:
        if self.accept is None:
            return
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        top, height = self._bar_top(), self.BAR_PX
        keep = QRectF(self._x(0), top, self._x(self.accept) - self._x(0), height)
        reject = QRectF(self._x(self.accept), top, self._x(1) - self._x(self.accept), height)
        painter.fillRect(keep, QColor(R_COLOUR).lighter(150))
        painter.fillRect(reject, QColor("#D55E00").lighter(160))
        painter.setPen(QPen(self.palette().text().color(), 1))
        painter.drawRect(QRectF(self._x(0), top, self._x(1) - self._x(0), height))
        rects = self.label_rects()
        self._draw_mark(painter, top, height, self.accept, rects)
        self._draw_u(painter, top, height, rects)
        painter.end()

    def _draw_mark(self, painter: QPainter, top: float, height: float, accept: float, rects) -> None:
        x = self._x(accept)
        painter.setPen(QPen(QColor(P_COLOUR), 2.5))
        painter.drawLine(QPointF(x, top - 4), QPointF(x, top + height + 4))
        painter.drawText(rects["mark"], Qt.AlignmentFlag.AlignCenter, self._mark_text(accept))
        painter.setPen(QPen(self.palette().text().color(), 1))
        for name, align, text in (("tick 0", Qt.AlignmentFlag.AlignLeft, "0"), ("tick 1", Qt.AlignmentFlag.AlignRight,
                                                                               "1")):
            if name in rects:
                painter.drawText(rects[name], align, text)

    def _draw_u(self, painter: QPainter, top: float, height: float, rects) -> None:
        if self.u is None or self.accept is None:
            return
        x = self._x(self.u)
        painter.setPen(QPen(QColor("#000000"), 1))
        painter.setBrush(QBrush(QColor("#CC79A7")))
        painter.drawEllipse(QPointF(x, top + height / 2), 5.5, 5.5)
        painter.setPen(QPen(self.palette().text().color(), 1))
        painter.drawText(rects["u"], Qt.AlignmentFlag.AlignCenter, self._u_text(self.u, self.accept))


def _clamped(left: float, width: float, low: float, high: float) -> float:
    """`left` moved so that [left, left + width] lies within [low, high] (at `low` when it cannot)."""
    return max(low, min(left, high - width))


EMPTY_HEADER = "Click a token in the text (or Step a paused run) to inspect its pass."


class PassInspector(QWidget):
    sig_pass_shown = Signal(int)  # index of the pass now shown (a click, a step, or previous / next)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._session: RunView | None = None
        self._token_text: Callable[[int], str] = lambda token_id: f"#{token_id}"
        self.inspection: PassInspection | None = None
        self.previous_button = QPushButton("◀ Previous pass")
        self.next_button = QPushButton("Next pass ▶")
        self.previous_button.clicked.connect(self.show_previous)
        self.next_button.clicked.connect(self.show_next)
        self.header = _wrapping_label(EMPTY_HEADER)
        self.block = _wrapping_label("")
        self.block.setTextFormat(Qt.TextFormat.RichText)
        self.tree_view = TreeView()  # tree passes only: every node, the accepted path and the appended token
        self.tree_view.sig_node_clicked.connect(self._select_node)
        self._row_nodes: dict[int, int] = {}  # tree passes: table row -> its box in the tree
        self.table = self._build_table()
        self.strip = AcceptStrip()
        self.strip.setToolTip("Under sampling a draft is kept iff the uniform draw u (dot) is at most "
                              "min(1, p/q) (mark): the green part of [0, 1]")
        self.bars = BarChart("Top of p (target) and q (drafter) at the selected row", ("p", "q"),
                             (P_COLOUR, Q_COLOUR))
        self.residual_title = _wrapping_label("")
        self.residual = BarChart("Residual norm(max(0, p − q)) at the first rejection", ("p", "q", "residual"),
                                 (P_COLOUR, Q_COLOUR, R_COLOUR), open_last=True)
        self.ledger = _wrapping_label("")
        self.paragraph = _wrapping_label("")
        self.paragraph.setObjectName("passExplanation")
        self._layout()
        install_widget_export_menu(self, "inspector")  # the whole inspector as a figure for slides
        self.clear()

    # --- construction -----------------------------------------------------------
    def _build_table(self) -> QTableWidget:
        table = QTableWidget(0, len(COLUMNS))
        table.setHorizontalHeaderLabels(COLUMNS)
        for col, tip in COLUMN_TIPS.items():
            header = table.horizontalHeaderItem(col)
            assert header is not None, "setHorizontalHeaderLabels made every column's header"
            header.setToolTip(tip)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        table.verticalHeader().hide()
        table.verticalHeader().setDefaultSectionSize(22)
        table.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        table.setFixedHeight(120)
        table.currentCellChanged.connect(lambda row, *_: self.select_row(row))
        return table

    def _layout(self) -> None:
        """Navigation and header on top; the table and the words left of the charts, so one pass fits at once."""
        top = QHBoxLayout()
        top.addWidget(self.previous_button)
        top.addWidget(self.next_button)
        top.addWidget(self.header, 1)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        words = self._column(self.block, self.tree_view, self.table, self.strip, self.residual_title, self.ledger,
                             self.paragraph)
        charts = QWidget()
        chart_column = QVBoxLayout(charts)
        chart_column.setContentsMargins(0, 0, 0, 0)
        chart_column.addWidget(self.bars, 1)
        chart_column.addWidget(self.residual, 1)
        splitter.addWidget(scrolled(words))
        splitter.addWidget(scrolled(charts))
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        splitter.setChildrenCollapsible(False)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 4, 4, 4)
        outer.addLayout(top)
        outer.addWidget(splitter, 1)

    @staticmethod
    def _column(*parts: QWidget) -> QWidget:
        content = QWidget()
        column = QVBoxLayout(content)
        column.setContentsMargins(0, 0, 0, 0)
        for part in parts:
            column.addWidget(part)
        column.addStretch(1)
        return content

    # --- binding ------------------------------------------------------------------
    def set_session(self, session: RunView) -> None:
        self._session = session
        session.sig_begun.connect(self.clear)  # a new run: nothing of the previous one stays
        session.sig_refresh.connect(self._update_navigation)  # passes arrived: "Next pass" may lead somewhere now

    def set_token_text(self, token_text: Callable[[int], str]) -> None:
        """How to spell a token id (the tokenizer's decode); ids are shown as #id without it."""
        self._token_text = token_text

    def clear(self) -> None:
        self.inspection = None
        self.header.setText(EMPTY_HEADER)
        self.table.setRowCount(0)
        self.block.setText("")
        self._show_tree(None)
        self.bars.show_bars([], {}, None)
        self.strip.set_values(None, None)
        self._show_residual(None)
        self._update_navigation()
        self.ledger.hide()
        self.paragraph.setText("")

    # --- showing a pass -------------------------------------------------------------
    def show_pass(self, index: int) -> None:
        """Show the pass with this index from the bound session (a token was clicked, or a step ran)."""
        if self._session is None:
            return
        passes = self._session.passes
        event = passes[index] if 0 <= index < len(passes) and passes[index].index == index else next(
            (p for p in passes if p.index == index), None)
        if event is not None:
            self.show_event(event)

    def show_previous(self) -> None:
        if self.inspection is not None:
            self.show_pass(self.inspection.event.index - 1)

    def show_next(self) -> None:
        if self.inspection is not None:
            self.show_pass(self.inspection.event.index + 1)

    def _update_navigation(self) -> None:
        index = self.inspection.event.index if self.inspection is not None else None
        passes = self._session.passes if self._session is not None else []
        last = passes[-1].index if passes else -1
        self.previous_button.setEnabled(index is not None and index > 0)
        self.next_button.setEnabled(index is not None and index < last)

    def show_event(self, event: PassEvent) -> None:
        self.inspection = inspection = inspect_pass(event)
        self.header.setText(_header_text(event))
        self.block.setText(self._block_html(event))
        self._show_tree(event)
        self._fill_table(inspection)
        self._show_residual(inspection)
        self._show_ledger(inspection)
        self.paragraph.setText(explain_pass(event, self._text_of))
        self.table.selectRow(self._default_row(inspection))
        self._update_navigation()
        self.sig_pass_shown.emit(event.index)

    def _text_of(self, token_id: int) -> str:
        try:
            return self._token_text(token_id)
        except Exception:  # noqa: BLE001 - a tokenizer that cannot spell an id must not break the inspector
            return f"#{token_id}"

    @staticmethod
    def _default_row(inspection: PassInspection) -> int:
        """The first rejection if any (the interesting row), else the appended token's row."""
        if inspection.first_rejection is not None:
            return inspection.first_rejection
        return len(inspection.positions)

    # --- the draft block and the tree ------------------------------------------------------
    def _block_html(self, event: PassEvent) -> str:
        dark = ts.is_dark(self.palette())
        chips = [_chip(t.text, t.id, t.outcome, dark) for t in event.drafted]
        if event.appended is not None:
            chips.append("→ " + _chip(event.appended.text, event.appended.id, event.appended.kind, dark))
        if not chips:
            return ""
        if event.tree is not None:  # the table's rows: the tree's main line
            return "Main line (the path, then its first rejection): " + " ".join(chips)
        return "Draft block: " + " ".join(chips)

    def _show_tree(self, event: PassEvent | None) -> None:
        """The tree of a tree pass above the table; a chain pass shows none."""
        self._row_nodes = {}
        if event is None or event.tree is None:
            self.tree_view.clear()
            self.tree_view.hide()
            return
        self._row_nodes = dict(enumerate(main_line(event)))
        if event.appended is not None:
            self._row_nodes[len(event.drafted)] = APPENDED  # the table's last row
        self.tree_view.show_pass(event, self._text_of)
        self.tree_view.show()

    def _select_node(self, key: int) -> None:
        """A box of the tree was clicked: select its table row if it is on the main line."""
        row = next((row for row, node in self._row_nodes.items() if node == key), None)
        if row is not None:
            self.table.selectRow(row)

    # --- the table ------------------------------------------------------------------------
    def _fill_table(self, inspection: PassInspection) -> None:
        event = inspection.event
        self.table.blockSignals(True)
        self.table.setRowCount(len(inspection.positions) + (1 if event.appended is not None else 0))
        for position in inspection.positions:
            self._fill_position(position, event.verify)
        if event.appended is not None:
            self._fill_appended(len(inspection.positions), event.appended)
        for col in range(len(COLUMNS)):
            hidden = (col in SAMPLING_ONLY and event.verify != "sample") or (col in ASD_ONLY and event.verify != "asd")
            self.table.setColumnHidden(col, hidden)
        self.table.blockSignals(False)
        self._fit_table_height()

    def _fit_table_height(self) -> None:
        """As tall as its rows (a K = 8 block still fits), so the words under it stay in view."""
        rows = sum(self.table.rowHeight(row) for row in range(self.table.rowCount()))
        scroll_bar = self.table.horizontalScrollBar().sizeHint().height()
        frame = 2 * self.table.frameWidth()
        self.table.setFixedHeight(self.table.horizontalHeader().height() + rows + scroll_bar + frame)

    def _fill_position(self, position: PositionView, verify: str) -> None:
        row, token = position.index, position.token
        self._set(row, COL_POS, str(row + 1), row + 1)
        self._set(row, COL_TOKEN, token_label(token.text, token.id), token.id, token.outcome)
        self._set_number(row, COL_P, token.p)
        self._set_number(row, COL_Q, token.q)
        if token.q is None:
            self._set(row, COL_Q, "1 (one-hot)", None)
        self._set_number(row, COL_RATIO, position.ratio)
        self._set_number(row, COL_ACCEPT, position.accept_prob)
        self._set_number(row, COL_U, position.u)
        match = "✓" if token.target_id == token.id else "✗"
        self._set(row, COL_TARGET, f"{token_label(self._text_of(token.target_id), token.target_id)} {match}",
                  token.target_id)
        if position.asd is not None:
            self._fill_asd(row, position.asd)
        self._set(row, COL_VERDICT, position.verdict, position.verdict, token.outcome)

    def _fill_asd(self, row: int, check: AsdCheck) -> None:
        self._set_number(row, COL_REGRET, check.regret)
        self._set(row, COL_SUFFIX, str(check.suffix_value), check.suffix_value)
        mark = lambda ok: ("✓" if ok else "✗") if check.mismatch else "(match)"  # noqa: E731 - one-line helper
        self._set(row, COL_GATE, f"{number_text(check.gate_ratio)} vs {number_text(check.gate)} {mark(check.gate_ok)}",
                  check.gate_ratio)
        self._set(row, COL_CAP, f"{check.block_mismatches} vs {check.cap} {mark(check.cap_ok)}", check.block_mismatches)
        self._set(row, COL_COST, f"{number_text(check.cost)} vs {number_text(check.remaining)} "
                                 f"{mark(check.affordable)}", check.cost)

    def _fill_appended(self, row: int, appended: AppendedToken) -> None:
        for col in range(len(COLUMNS)):
            self._set(row, col, "", None)
        self._set(row, COL_POS, "+", None)
        self._set(row, COL_TOKEN, token_label(appended.text, appended.id), appended.id, appended.kind)
        self._set_number(row, COL_P, appended.p)
        self._set(row, COL_VERDICT, ts.LABELS.get(appended.kind, appended.kind), appended.kind, appended.kind)

    def _set_number(self, row: int, col: int, value: float | None) -> None:
        self._set(row, col, number_text(value), value)

    def _set(self, row: int, col: int, text: str, value, style: str | None = None) -> None:
        item = QTableWidgetItem(text)
        item.setData(VALUE_ROLE, value)
        if style in ts.LOOKS:
            colour = ts.LOOKS[style].dark if ts.is_dark(self.palette()) else ts.LOOKS[style].light
            if colour:
                item.setForeground(QColor(colour))
        self.table.setItem(row, col, item)

    def value(self, row: int, col: int):
        """The exact value behind a cell (for tests and tooltips)."""
        item = self.table.item(row, col)
        return None if item is None else item.data(VALUE_ROLE)

    # --- the bars of the selected row ---------------------------------------------------------
    def select_row(self, row: int) -> None:
        """Draw the top of p and q for table row `row` (a drafted position, or the appended token's row)."""
        inspection = self.inspection
        if inspection is None or row < 0 or row >= self.table.rowCount():
            return
        detail = inspection.event.detail
        if row < len(inspection.positions):
            token = inspection.positions[row].token
            p_row, q_row, chosen = row, row, {token.id: (token.p, inspection.positions[row].q_effective)}
        else:  # the appended token was scored on row a (correction) or K (bonus)
            appended = inspection.event.appended
            assert appended is not None, "a row past the drafts is the appended token's"
            p_row, q_row, chosen = inspection.event.n_accepted, None, {appended.id: (appended.p, math.nan)}
        p_top = _row(detail.p_top, p_row) if detail is not None else ()
        q_top = _row(detail.q_top, q_row) if detail is not None and q_row is not None else ()
        if q_row is not None and inspection.positions[row].token.q is None:
            q_top = (TokenProb(inspection.positions[row].token.id, 1.0),)  # one-hot drafter
        labels, values, highlight = self._union_bars(p_top, q_top, chosen)
        self.bars.show_bars(labels, values, highlight)
        self._show_strip(row)
        if self.tree_view.pass_event is not None:
            self.tree_view.select(self._row_nodes.get(row))

    def _show_strip(self, row: int) -> None:
        """The 0–1 strip of a drafted row under sampling; hidden for the appended token and other rules."""
        inspection = self.inspection
        if inspection is None or inspection.event.verify != "sample" or row >= len(inspection.positions):
            self.strip.set_values(None, None)
            return
        position = inspection.positions[row]
        self.strip.set_values(position.accept_prob, position.u)

    def _union_bars(self, p_top, q_top, chosen: dict[int, tuple[float, float]]):
        # Zeros in a top-8 (top-k / top-p warping left fewer tokens) carry nothing worth a bar.
        p = {t.id: t.prob for t in p_top if t.prob > 0}
        q = {t.id: t.prob for t in q_top if t.prob > 0}
        for token_id, (p_x, q_x) in chosen.items():
            p.setdefault(token_id, p_x)
            if not math.isnan(q_x):
                q.setdefault(token_id, q_x)
        ids = sorted(set(p) | set(q), key=lambda i: (-p.get(i, 0.0), -q.get(i, 0.0), i))
        labels = [token_label(self._text_of(i), i) for i in ids]
        values = {"p": [p.get(i, math.nan) for i in ids], "q": [q.get(i, math.nan) for i in ids]}
        return labels, values, ids.index(next(iter(chosen)))

    # --- the residual --------------------------------------------------------------------------
    def _show_residual(self, inspection: PassInspection | None) -> None:
        bars = residual_bars(inspection.event) if inspection is not None else None
        visible = bars is not None
        self.residual.setVisible(visible)
        self.residual_title.setVisible(visible)
        if bars is None or inspection is None:
            self.residual.show_bars([], {}, None)
            return
        entries = bars.entries
        labels = [token_label(self._text_of(e.id), e.id) for e in entries] + [OTHERS]
        values = {"p": [e.p for e in entries] + [math.nan], "q": [e.q for e in entries] + [math.nan],
                  "residual": [e.r for e in entries] + [bars.other]}
        highlight = next((i for i, e in enumerate(entries) if e.id == bars.sampled), None)
        self.residual.show_bars(labels, values, highlight)
        self.residual_title.setText(_residual_text(inspection, bars, self._text_of))

    def residual_shown(self) -> dict[str, list[float]]:
        """The residual chart's drawn bars by series (for tests)."""
        return {name: self.residual.heights(name) for name in ("p", "q", "residual")}

    # --- the ASD ledger --------------------------------------------------------------------------
    def _show_ledger(self, inspection: PassInspection) -> None:
        ledger = inspection.ledger
        self.ledger.setVisible(ledger is not None)
        if ledger is None:
            return
        detail = inspection.event.detail
        has_knobs = detail is not None and detail.asd_gate is not None
        knobs = f" · g = {detail.asd_gate:g}, M = {detail.asd_cap}" if detail is not None and has_knobs else ""
        spent = f"{number_text(ledger.before)} → {number_text(ledger.after)} of B = {number_text(ledger.budget)}"
        self.ledger.setText(
            f"ASD ledger: {spent} (rem at block start {number_text(ledger.remaining_before)}) · "
            f"exceptions {ledger.exceptions_before} → {ledger.exceptions_after}{knobs}")


def _row(rows: tuple, index: int) -> tuple:
    return rows[index] if 0 <= index < len(rows) else ()


def _wrapping_label(text: str) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _header_text(event: PassEvent) -> str:
    drafter = event.drafter or "no drafter"
    if event.tree is not None:
        return (f"Pass {event.index} · {drafter} · token tree of {len(event.tree)} nodes, depth ≤ {event.k} · "
                f"verify {event.verify} · {event.n_accepted} accepted, {len(event.committed_ids)} committed")
    return (f"Pass {event.index} · {drafter} · K = {event.k} · verify {event.verify} · "
            f"{len(event.drafted)} drafted, {event.n_accepted} accepted, {len(event.committed_ids)} committed")


def _chip(text: str, token_id: int, style: str, dark: bool) -> str:
    look = ts.LOOKS.get(style, ts.LOOKS[ts.TARGET])
    css = []
    colour = look.dark if dark else look.light
    tint = look.tint_dark if dark else look.tint_light
    if colour:
        css.append(f"color:{colour}")
    if tint:
        css.append(f"background-color:{tint}")
    if look.bold:
        css.append("font-weight:bold")
    if look.italic:
        css.append("font-style:italic")
    underlined = look.underline != QTextCharFormat.UnderlineStyle.NoUnderline
    decorations = [name for name, on in (("line-through", look.strike), ("underline", underlined)) if on]
    if decorations:
        css.append("text-decoration:" + " ".join(decorations))
    title = html.escape(ts.LABELS.get(style, style))
    shown = html.escape(token_label(text, token_id))
    return f'<span style="{";".join(css)}" title="{title}">&nbsp;{shown}&nbsp;</span>'


def _residual_text(inspection: PassInspection, bars, text_of) -> str:
    detail = inspection.event.detail
    n = inspection.first_rejection
    shown = sum(e.r for e in bars.entries if not math.isnan(e.r))
    norm = None if detail is None else detail.residual_norm
    z = "" if norm is None else f"; before normalising it summed to {norm:.4g}"
    sampled = bars.sampled
    token = "" if sampled is None else f"; the sampled token (outlined) is {token_label(text_of(sampled), sampled)}"
    return (f"Residual at position {(n or 0) + 1}: zero wherever q ≥ p; shown tokens {shown:.4f} + other tokens "
            f"{bars.other:.4f} = {shown + bars.other:.4f}{z}{token}.")
