"""The token tree of one verification pass, drawn sideways (docs/ALGORITHMS.md §9).

Depth runs left to right, so every root-to-leaf branch reads as a line of
text: the root (the last committed token) is a dot at the left, each column
holds the nodes of one depth, and a node's first child sits on its own row
while later siblings (tried after it) start the rows below. One row per
branch. The accepted path is drawn in the accepted colour with thick edges,
the target's appended token (resampled or bonus) as a last box at its end,
in its own colour and placed after the children the target tried there;
rejected nodes are struck through as in the token stream, nodes the target
never reached are ghosted with a dashed border, and clipped ones (accepted,
but past the end of the generation) are ghosted in the accepted colour.

Hovering a box shows its token, p, q, the target's argmax at its parent and
the acceptance probability; clicking one emits its key (`sig_node_clicked`),
which the pass inspector maps to its table row. Long trees scroll: the view
is at most MAX_ROWS rows tall and as wide as the inspector lets it be.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPainterPath, QPalette, QPen
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QToolTip, QVBoxLayout, QWidget

from app.engine.events import ACCEPTED, CLIPPED, NOT_REACHED, REJECTED, AppendedToken, PassEvent, TreeNode
from app.teaching.explain import branch_count, tested_count
from app.widgets import token_style as ts
from app.widgets.token_style import token_label

ROOT = -1  # key of the root: the last committed token (a node's parent -1, as in TreeNode)
APPENDED = -2  # key of the token the target appended after the path
ROOT_STYLE = "root"
MARGIN = 6
COLUMN_GAP = 22  # room for the edges between two depths
ROW_GAP = 4
PAD_X, PAD_Y = 5, 2
ROOT_RADIUS = 5
MAX_ROWS = 8  # rows in view before the tree scrolls
SELECTED_COLOUR = "#e69f00"  # the selected row's box, outlined as the token stream outlines the selected pass
OUTCOME_LABELS = {ACCEPTED: "accepted (on the path)", REJECTED: "rejected by the target",
                  NOT_REACHED: "not reached (its parent or an earlier sibling decided the pass)",
                  CLIPPED: "dropped: accepted, but past the end of the generation"}


@dataclass(frozen=True)
class PlacedNode:
    """Where one box of the tree goes: column 0 is the root, column d holds depth d."""

    key: int  # node id, ROOT or APPENDED
    parent: int | None  # key of the parent box (None for the root)
    column: int
    row: int
    label: str  # the token as the stream spells it: whitespace visible, long text elided
    style: str  # a node outcome, an appended kind, or ROOT_STYLE


def place_tree(tree: tuple[TreeNode, ...], appended: AppendedToken | None,
               path: tuple[int, ...] | None) -> list[PlacedNode]:
    """Columns by depth and one row per branch, in the tree's order (parents first, siblings in try order).

    The appended token is the last child of the path's end (of the root when nothing was accepted).
    """
    children: dict[int, list[int]] = {}
    for node in tree:
        children.setdefault(node.parent, []).append(node.id)
    if appended is not None:
        children.setdefault(path[-1] if path else ROOT, []).append(APPENDED)
    by_id = {node.id: node for node in tree}
    placed: list[PlacedNode] = []
    next_row = 0

    def place(key: int, parent: int | None, column: int) -> int:
        nonlocal next_row
        rows = [place(child, key, column + 1) for child in children.get(key, ())]
        if rows:
            row = rows[0]
        else:
            row, next_row = next_row, next_row + 1
        if key == ROOT:
            label, style = "", ROOT_STYLE
        elif key == APPENDED:
            label, style = token_label(appended.text, appended.id), appended.kind
        else:
            label, style = token_label(by_id[key].text, by_id[key].token), by_id[key].outcome
        placed.append(PlacedNode(key, parent, column, row, label, style))
        return row

    place(ROOT, None, 0)
    return sorted(placed, key=lambda box: (box.column, box.row))


def main_line(event: PassEvent) -> list[int]:
    """The node of each of the event's `drafted` tokens, in order: the accepted path, then the first rejected
    child at its end (the chain fields of a tree pass); shorter if the tree does not hold them all."""
    tree = event.tree or ()
    keys = list(event.path or ())[: len(event.drafted)]
    for token in event.drafted[len(keys):]:
        parent = keys[-1] if keys else ROOT
        candidates = [n for n in tree if n.parent == parent and n.token == token.id and n.id not in keys]
        if not candidates:
            break
        keys.append(next((n.id for n in candidates if n.outcome == token.outcome), candidates[0].id))
    return keys


def node_tooltip(node: TreeNode, siblings: list[int], verify: str, text_of: Callable[[int], str]) -> str:
    """What a hover over a node shows: the token, its verdict, p, q, the target's argmax and the acceptance."""
    position = f"child {siblings.index(node.id) + 1} of {len(siblings)} of its parent" if len(siblings) > 1 \
        else "the only child of its parent"
    q = "1 (one-hot: a deterministic drafter)" if node.q is None else f"{node.q:.4f}"
    argmax = token_label(text_of(node.target_id), node.target_id)
    match = "= this token" if node.target_id == node.token else "≠ this token"
    lines = [f"<b>{html.escape(repr(node.text))}</b> — {OUTCOME_LABELS.get(node.outcome, node.outcome)}",
             f"node {node.id} · depth {node.depth} · {position}",
             f"p(x) = {node.p:.4f} &nbsp; q(x) = {q}",
             f"target argmax at the parent: {html.escape(argmax)} ({match})"]
    if node.accept_prob is not None:
        lines.append(f"acceptance probability = {node.accept_prob:.4f}")
    elif verify == "greedy" and node.outcome != NOT_REACHED:
        lines.append("greedy: kept iff it equals the target's argmax")
    return "<br>".join(lines)


def appended_tooltip(appended: AppendedToken) -> str:
    return "<br>".join([f"<b>{html.escape(repr(appended.text))}</b> — {ts.LABELS.get(appended.kind, appended.kind)}"
                        " (from the target, after the accepted path)", f"p(x) = {appended.p:.4f}"])


ROOT_TOOLTIP = "The last committed token: every branch continues the text from here."


@dataclass(frozen=True)
class BoxLook:
    text: QColor
    border: QColor
    fill: QColor | None = None
    border_width: float = 1.0
    dashed: bool = False
    italic: bool = False
    strike: bool = False
    bold: bool = False
    opacity: float = 1.0


def box_looks(dark: bool, text: QColor) -> dict[str, BoxLook]:
    """The token stream's colours (token_style.LOOKS) as boxes; ghosts dashed and faded."""
    def colour(name: str) -> QColor:
        look = ts.LOOKS[name]
        chosen = look.dark if dark else look.light
        return QColor(chosen) if chosen else QColor(text)

    def tint(name: str, alpha: int = 40) -> QColor:
        look = ts.LOOKS[name]
        chosen = look.tint_dark if dark else look.tint_light
        if chosen:
            return QColor(chosen)
        faint = colour(name)
        faint.setAlpha(alpha)
        return faint

    grey = colour(ts.REJECTED)
    return {
        ACCEPTED: BoxLook(colour(ts.ACCEPTED), colour(ts.ACCEPTED), tint(ts.ACCEPTED), border_width=2.0),
        REJECTED: BoxLook(grey, grey, italic=True, strike=True),
        NOT_REACHED: BoxLook(grey, grey, dashed=True, opacity=0.55),
        CLIPPED: BoxLook(colour(ts.ACCEPTED), colour(ts.ACCEPTED), dashed=True, opacity=0.55),
        ts.RESAMPLED: BoxLook(colour(ts.RESAMPLED), colour(ts.RESAMPLED), tint(ts.RESAMPLED), 2.0, bold=True),
        ts.BONUS: BoxLook(colour(ts.BONUS), colour(ts.BONUS), tint(ts.BONUS), 2.0, bold=True),
        ts.TARGET: BoxLook(QColor(text), QColor(text), None, 2.0, bold=True),
        ROOT_STYLE: BoxLook(QColor(text), QColor(text), QColor(text)),
    }


def _blend(ink: QColor, paper: QColor, share: float) -> QColor:
    """`share` of `ink` over `paper`."""
    return QColor.fromRgbF(*(share * a + (1 - share) * b for a, b in zip(ink.getRgbF()[:3], paper.getRgbF()[:3],
                                                                          strict=True)))


class TreeCanvas(QWidget):
    """Paints the placed boxes and edges; its size is the tree's (the scroll area around it scrolls)."""

    sig_node_clicked = Signal(int)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setMouseTracking(True)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.Base)
        self.boxes: dict[int, PlacedNode] = {}
        self.rects: dict[int, QRectF] = {}
        self.tooltips: dict[int, str] = {}
        self.on_path: set[int] = set()  # keys of the boxes on the accepted path, the appended token included
        self.selected: int | None = None
        self._size = QSize(0, 0)

    def set_tree(self, placed: list[PlacedNode], tooltips: dict[int, str], on_path: set[int]) -> None:
        self.boxes = {box.key: box for box in placed}
        self.tooltips, self.on_path, self.selected = tooltips, on_path, None
        self._lay_out()

    def _lay_out(self) -> None:
        metrics = self.fontMetrics()
        bold = QFont(self.font())
        bold.setBold(True)
        bold_metrics = QFontMetrics(bold)
        width = {key: (bold_metrics if box.style in (ts.RESAMPLED, ts.BONUS, ts.TARGET) else metrics)
                 .horizontalAdvance(box.label) + 2 * PAD_X + 2 for key, box in self.boxes.items()}
        columns = max((box.column for box in self.boxes.values()), default=-1) + 1
        column_width = [2 * ROOT_RADIUS if c == 0 else 0 for c in range(columns)]
        for key, box in self.boxes.items():
            if box.column:
                column_width[box.column] = max(column_width[box.column], width[key])
        left = [MARGIN + sum(column_width[:c]) + c * COLUMN_GAP for c in range(columns)]
        row_height = metrics.height() + 2 * PAD_Y
        self.rects = {}
        for key, box in self.boxes.items():
            top = MARGIN + box.row * (row_height + ROW_GAP)
            if box.column == 0:
                self.rects[key] = QRectF(left[0], top + row_height / 2 - ROOT_RADIUS, 2 * ROOT_RADIUS, 2 * ROOT_RADIUS)
            else:
                self.rects[key] = QRectF(left[box.column], top, width[key], row_height)
        rows = max((box.row for box in self.boxes.values()), default=-1) + 1
        self._size = QSize(int(left[-1] + column_width[-1] + MARGIN) if columns else 0,
                           int(MARGIN * 2 + rows * row_height + max(rows - 1, 0) * ROW_GAP))
        self.setFixedSize(self._size)
        self.update()

    def sizeHint(self) -> QSize:
        return self._size

    def row_height(self) -> float:
        return self.fontMetrics().height() + 2 * PAD_Y + ROW_GAP

    def select(self, key: int | None) -> None:
        self.selected = key if key in self.boxes else None
        self.update()

    def key_at(self, point: QPointF) -> int | None:
        return next((key for key, rect in self.rects.items() if rect.adjusted(-2, -2, 2, 2).contains(point)), None)

    # --- painting --------------------------------------------------------------------
    def paintEvent(self, event) -> None:
        if not self.boxes:
            return
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        text = self.palette().text().color()
        looks = box_looks(ts.is_dark(self.palette()), text)
        faint = _blend(text, self.palette().base().color(), 0.45)  # opaque: shared trunks do not darken
        later = [key for key in self.boxes if key in self.on_path]  # the path's edges go on top
        for key in [k for k in self.boxes if k not in self.on_path] + later:
            self._draw_edge(painter, key, looks, faint)
        for box in self.boxes.values():
            self._draw_box(painter, box, looks[box.style] if box.style in looks else looks[ts.TARGET])
        if self.selected is not None:
            painter.setOpacity(1.0)
            painter.setPen(QPen(QColor(SELECTED_COLOUR), 2.0))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(self.rects[self.selected].adjusted(-3, -3, 3, 3), 5, 5)
        painter.end()

    def _draw_edge(self, painter: QPainter, key: int, looks: dict[str, BoxLook], faint: QColor) -> None:
        box = self.boxes[key]
        if box.parent is None:
            return
        start, end = self.rects[box.parent], self.rects[key]
        x0, y0 = start.right(), start.center().y()
        x1, y1 = end.left(), end.center().y()
        bend = x1 - COLUMN_GAP / 2
        route = QPainterPath(QPointF(x0, y0))
        if abs(y1 - y0) < 0.5:
            route.lineTo(x1, y1)
        else:
            radius = min(6.0, abs(y1 - y0) / 2)
            route.lineTo(bend - radius, y0)
            route.quadTo(bend, y0, bend, y0 + radius)
            route.lineTo(bend, y1 - radius)
            route.quadTo(bend, y1, bend + radius, y1)
            route.lineTo(x1, y1)
        if key in self.on_path:
            pen = QPen(looks[box.style].border if key == APPENDED else looks[ACCEPTED].border, 2.5)
        else:
            pen = QPen(faint, 1.0, Qt.PenStyle.DashLine if box.style == NOT_REACHED else Qt.PenStyle.SolidLine)
        painter.setOpacity(1.0)
        painter.setPen(pen)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawPath(route)

    def _draw_box(self, painter: QPainter, box: PlacedNode, look: BoxLook) -> None:
        rect = self.rects[box.key]
        painter.setOpacity(look.opacity)
        pen = QPen(look.border, look.border_width, Qt.PenStyle.DashLine if look.dashed else Qt.PenStyle.SolidLine)
        painter.setPen(pen)
        if box.key == ROOT:
            painter.setBrush(look.fill)
            painter.drawEllipse(rect)
            return
        painter.setBrush(look.fill if look.fill is not None else self.palette().base())
        painter.drawRoundedRect(rect, 4, 4)
        font = QFont(self.font())
        font.setItalic(look.italic)
        font.setStrikeOut(look.strike)
        font.setBold(look.bold)
        painter.setFont(font)
        painter.setPen(look.text)
        painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, box.label)

    # --- interaction --------------------------------------------------------------------
    def event(self, event) -> bool:
        if event.type() == QEvent.Type.ToolTip:
            key = self.key_at(QPointF(event.pos()))
            if key is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), self.tooltips.get(key, ""), self)
            return True
        return super().event(event)

    def mouseReleaseEvent(self, event) -> None:
        super().mouseReleaseEvent(event)
        key = self.key_at(event.position())
        if event.button() == Qt.MouseButton.LeftButton and key is not None:
            self.sig_node_clicked.emit(key)


class TreeView(QWidget):
    """A caption (size, branches, what the target tested) over the scrolling tree of one pass."""

    sig_node_clicked = Signal(int)  # key of a clicked box: a node id, or APPENDED

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.TextFormat.RichText)
        self.canvas = TreeCanvas()
        self.canvas.sig_node_clicked.connect(self.sig_node_clicked)
        self.area = QScrollArea()
        self.area.setWidget(self.canvas)
        self.area.setWidgetResizable(False)
        self.area.setFrameShape(QFrame.Shape.StyledPanel)
        self.area.setBackgroundRole(QPalette.ColorRole.Base)
        self.area.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(self.caption)
        column.addWidget(self.area)
        self.pass_event: PassEvent | None = None

    def clear(self) -> None:
        self.pass_event = None
        self.canvas.set_tree([], {}, set())
        self.caption.setText("")

    def show_pass(self, event: PassEvent, text_of: Callable[[int], str]) -> None:
        """Draw the tree of a tree pass (`event.tree` is not None)."""
        self.pass_event = event
        tree = event.tree or ()
        siblings: dict[int, list[int]] = {}
        for node in tree:
            siblings.setdefault(node.parent, []).append(node.id)
        tooltips = {node.id: node_tooltip(node, siblings[node.parent], event.verify, text_of) for node in tree}
        tooltips[ROOT] = ROOT_TOOLTIP
        if event.appended is not None:
            tooltips[APPENDED] = appended_tooltip(event.appended)
        on_path = set(event.path or ()) | ({APPENDED} if event.appended is not None else set())
        self.canvas.set_tree(place_tree(tree, event.appended, event.path), tooltips, on_path)
        self.caption.setText(self._caption(event))
        self._fit_height()

    def _caption(self, event: PassEvent) -> str:
        tree = event.tree or ()
        depth = max((node.depth for node in tree), default=0)
        accepted = len(event.path or ())
        end = "" if event.appended is None else f" + {ts.LABELS.get(event.appended.kind, event.appended.kind)}"
        hint = ts.LOOKS[ts.REJECTED].light
        return (f"<b>Token tree</b>: {len(tree)} nodes, {branch_count(tree)} branches, depth {depth} · "
                f"the target tested {tested_count(tree)} · accepted path {accepted}{end} "
                f'<span style="color:{hint}">(dashed: not reached; hover for p and q)</span>')

    def _fit_height(self) -> None:
        """As tall as the tree up to MAX_ROWS rows (then it scrolls), plus a scroll bar when it is too wide."""
        frame = 2 * self.area.frameWidth()
        shown = min(self.canvas.height(), int(MARGIN * 2 + MAX_ROWS * self.canvas.row_height()))
        too_wide = self.canvas.width() > self.area.width() - frame - (
            self.area.verticalScrollBar().sizeHint().width() if shown < self.canvas.height() else 0)
        scroll_bar = self.area.horizontalScrollBar().sizeHint().height() if too_wide else 0
        self.area.setFixedHeight(shown + frame + scroll_bar)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if self.pass_event is not None:
            self._fit_height()

    # --- state, for the inspector and tests ------------------------------------------------
    def select(self, key: int | None) -> None:
        """Outline one box (the inspector's selected row), or none."""
        self.canvas.select(key)
        if key is not None and key in self.canvas.rects:
            rect = self.canvas.rects[key]
            self.area.ensureVisible(int(rect.center().x()), int(rect.center().y()), int(rect.width()), 20)

    @property
    def selected(self) -> int | None:
        return self.canvas.selected

    def node_keys(self) -> list[int]:
        """Keys of the drawn tree nodes (not the root nor the appended token)."""
        return [key for key in self.canvas.boxes if key >= 0]

    def style_of(self, key: int) -> str:
        return self.canvas.boxes[key].style

    def label_of(self, key: int) -> str:
        return self.canvas.boxes[key].label

    def tooltip(self, key: int) -> str:
        return self.canvas.tooltips.get(key, "")

    def rect_of(self, key: int) -> QRectF:
        """Where a box is drawn, in the canvas's coordinates."""
        return self.canvas.rects[key]

    def on_path(self) -> set[int]:
        return set(self.canvas.on_path)
