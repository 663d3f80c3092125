"""Legend of the token outcomes, drawn with the very formats the token view uses."""

from __future__ import annotations

import math

from PySide6.QtCore import QSizeF, Qt, Signal
from PySide6.QtGui import QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QTextEdit, QWidget

from app.widgets import token_style as ts

SHOWN = (ts.ACCEPTED, ts.REJECTED, ts.RESAMPLED, ts.BONUS, ts.ASD_EXCEPTION, ts.TARGET)


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
        self.sample.setToolTip("<br>".join(f"<b>{ts.LABELS[n]}</b>: {ts.EXPLANATIONS[n]}" for n in SHOWN))
        self.hide_rejected = QCheckBox("Hide rejected")
        self.hide_rejected.setToolTip("Hide the struck-through ghost text of rejected drafts")
        self.hide_rejected.toggled.connect(self.sig_hide_rejected)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.sample, 1)
        row.addWidget(self.hide_rejected)
        self._render()

    def _render(self) -> None:
        formats = ts.make_formats(ts.is_dark(self.palette()))
        self.sample.clear()
        cursor = QTextCursor(self.sample.document())
        for name in SHOWN:
            cursor.insertText(ts.LABELS[name], formats[name])
            cursor.insertText("\u2003", QTextCharFormat())  # em space between entries

    def _fit_height(self, size: QSizeF) -> None:
        """As tall as the wrapped entries, at any width and font size: a legend is never cut."""
        self.sample.setFixedHeight(math.ceil(size.height()) + 2 * self.sample.frameWidth())
        self.sample.verticalScrollBar().setValue(0)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() in (event.Type.PaletteChange, event.Type.FontChange):
            self._render()
