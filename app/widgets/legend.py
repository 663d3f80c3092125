"""Legend of the token outcomes, drawn with the very formats the token view uses.

The entries and the "Hide rejected" box flow as one run of text across the whole width: when everything fits on
one line the box stands at the right end, otherwise it follows the last entry like a word. When the full labels
("accepted draft", "resampled / correction", ...) would take more lines than short ones ("accepted",
"resampled", ...) — a narrow window or the Classroom layout's larger fonts — the legend shows the short ones;
each entry's full label and description is its tooltip, and every outcome keeps its colour key. The legend's
own tooltip also explains the prompt's look and the stream's marks (a tree's branch count, a settings change),
which would not fit on the line.
"""

from __future__ import annotations

import math
from typing import cast

from PySide6.QtCore import QEvent, QObject, QPoint, QSizeF, Qt, QUrl, Signal
from PySide6.QtGui import (
    QColor,
    QHelpEvent,
    QImage,
    QResizeEvent,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextImageFormat,
)
from PySide6.QtWidgets import QCheckBox, QTextEdit, QToolTip, QVBoxLayout, QWidget

from app.widgets import token_style as ts
from app.widgets.token_view import TREE_MARK

SHOWN = (ts.ACCEPTED, ts.REJECTED, ts.RESAMPLED, ts.BONUS, ts.ASD_EXCEPTION, ts.TARGET)
SHORT_LABELS = {
    ts.ACCEPTED: "accepted",
    ts.REJECTED: "rejected",
    ts.RESAMPLED: "resampled",
    ts.BONUS: "bonus",
    ts.ASD_EXCEPTION: "ASD",
    ts.TARGET: "target only",
}
# In the tooltip only, so the legend keeps its one line at 1024 px: the prompt's look and the stream's marks.
MARKS = ((f"{TREE_MARK}6", "after a pass that verified a token tree: its number of branches (not generated text)"),
         ("⟂ K 4 → 6", "the drafter, K or verification rule changed here; the next pass uses it (not generated "
                       "text)"))
GAP = "\u2003"  # em space between entries
BOX_SPACE = QUrl("legend:hide-rejected")  # an empty picture that holds the box's place in the text


class TokenLegend(QWidget):
    sig_hide_rejected = Signal(bool)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.sample = QTextEdit()
        self.sample.setReadOnly(True)
        self.sample.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        self.sample.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.sample.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.sample.setFrameShape(QTextEdit.Shape.NoFrame)
        self.sample.viewport().setAutoFillBackground(False)
        # QTextEdit re-wraps its document to the viewport's width; the height follows every re-wrap.
        self.sample.document().documentLayout().documentSizeChanged.connect(self._fit_height)
        self.sample.setToolTip("<br>".join([f"<b>{ts.LABELS[n]}</b>: {ts.EXPLANATIONS[n]}" for n in SHOWN]
                                           + [f"<i>{ts.LABELS[ts.PROMPT]}</i> (grey italic): "
                                              f"{ts.EXPLANATIONS[ts.PROMPT]}"]
                                           + [f"<b>{mark}</b>: {words}" for mark, words in MARKS]))
        self.sample.viewport().installEventFilter(self)  # its width picks the labels; an entry's own tooltip
        self.hide_rejected = QCheckBox("Hide rejected", self.sample.viewport())  # placed in the flow of text
        self.hide_rejected.setToolTip("Hide the struck-through ghost text of rejected drafts")
        self.hide_rejected.toggled.connect(self.sig_hide_rejected)
        self.short = False  # short labels shown (full ones in the tooltips)
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.sample)
        self._render()

    # --- content ----------------------------------------------------------------------
    def _fill(self, document: QTextDocument, short: bool) -> None:
        """The entries in their outcomes' formats, then the box's place, in one paragraph."""
        formats = ts.make_formats(ts.is_dark(self.palette()))
        labels = SHORT_LABELS if short else ts.LABELS
        box = self.hide_rejected.sizeHint()
        document.clear()  # and its resources
        space = QImage(max(1, box.width()), 1, QImage.Format.Format_ARGB32)
        space.fill(QColor(0, 0, 0, 0))
        document.addResource(QTextDocument.ResourceType.ImageResource, BOX_SPACE, space)
        cursor = QTextCursor(document)
        for name in SHOWN:
            cursor.insertText(labels[name], formats[name])
            cursor.insertText(GAP, QTextCharFormat())
        place = QTextImageFormat()
        place.setName(BOX_SPACE.toString())
        place.setWidth(box.width())
        place.setHeight(1)  # the line keeps the text's height; the box is centred on it
        cursor.insertImage(place)

    def _render(self) -> None:
        """Fill the legend with the labels that take the fewest lines at this width (the full ones on a tie)."""
        width = self.sample.viewport().width()
        trial = QTextDocument()
        trial.setDefaultFont(self.sample.font())
        trial.setDocumentMargin(self.sample.document().documentMargin())
        trial.setTextWidth(width)
        self._fill(trial, short=False)
        full_lines = _lines(trial)
        self._fill(trial, short=True)
        self.short = _lines(trial) < full_lines
        document = self.sample.document()
        # Never narrower than the box with the text's margins, so the box is never cut.
        least = self.hide_rejected.sizeHint().width() + math.ceil(2 * document.documentMargin())
        if least != self.sample.minimumWidth():
            self.sample.setMinimumWidth(least)
        document.setTextWidth(width)
        self._fill(document, self.short)
        self._place_box()

    def _place_box(self) -> None:
        """The box on its place in the text: at the right end when the legend is one line."""
        document, box = self.sample.document(), self.hide_rejected.sizeHint()
        document.size()  # laid out at the current width
        cursor = QTextCursor(document)
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.movePosition(QTextCursor.MoveOperation.Left)  # just before the box's place
        line = self.sample.cursorRect(cursor)
        x = self.sample.viewport().width() - box.width() if self.line_count() == 1 else line.left()
        self.hide_rejected.setGeometry(x, line.center().y() - box.height() // 2, box.width(), box.height())

    def line_count(self) -> int:
        """Lines the legend takes now (for layout tests)."""
        return _lines(self.sample.document())

    def labels(self) -> list[str]:
        """The entries as shown, in order (for tests)."""
        return [(SHORT_LABELS if self.short else ts.LABELS)[name] for name in SHOWN]

    # --- events -----------------------------------------------------------------------
    def _fit_height(self, size: QSizeF) -> None:
        """As tall as the wrapped entries, at any width and font size: a legend is never cut."""
        self.sample.setFixedHeight(math.ceil(size.height()) + 2 * self.sample.frameWidth())
        self.sample.verticalScrollBar().setValue(0)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.sample.viewport():
            resize, tip = cast(QResizeEvent, event), cast(QHelpEvent, event)  # by the type() checked below
            if event.type() == QEvent.Type.Resize and resize.size().width() != resize.oldSize().width():
                self._render()  # the labels and the box's place follow the width (the height follows the text)
            elif event.type() == QEvent.Type.ToolTip:
                name = self.outcome_at(tip.pos())
                if name is not None:
                    QToolTip.showText(tip.globalPos(), f"<b>{ts.LABELS[name]}</b>: {ts.EXPLANATIONS[name]}",
                                      self.sample.viewport())
                    return True
        return super().eventFilter(watched, event)

    def outcome_at(self, point: QPoint) -> str | None:
        """The outcome of the entry at `point` of the legend's text area, if any."""
        position = self.sample.document().documentLayout().hitTest(point, Qt.HitTestAccuracy.ExactHit)
        if position < 0:
            return None
        cursor = QTextCursor(self.sample.document())
        cursor.setPosition(position + 1)  # charFormat() is the format of the character before the cursor
        return ts.outcome_of(cursor.charFormat())

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() in (event.Type.PaletteChange, event.Type.FontChange):
            self._render()


def _lines(document: QTextDocument) -> int:
    document.size()  # laid out
    return sum(block.layout().lineCount() for block in _blocks(document))


def _blocks(document: QTextDocument):
    block = document.begin()
    while block.isValid():
        yield block
        block = block.next()
