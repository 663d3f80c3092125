"""The colour legend above the text is never cut, however narrow the window or large the font."""

from __future__ import annotations

from PySide6.QtGui import QFont

from app.widgets.legend import TokenLegend


def fits(legend: TokenLegend) -> bool:
    document_height = legend.sample.document().size().height()
    return legend.sample.viewport().height() >= document_height - 1


def test_legend_grows_to_hold_every_entry_when_it_wraps(qtbot):
    legend = TokenLegend()
    qtbot.addWidget(legend)
    legend.resize(1400, 60)
    legend.show()
    qtbot.waitUntil(lambda: fits(legend))
    one_line = legend.sample.height()

    legend.resize(300, 60)
    qtbot.waitUntil(lambda: legend.sample.height() > one_line)  # wrapped onto more lines, and taller for it
    assert fits(legend)

    large = QFont(legend.font())
    large.setPointSizeF(large.pointSizeF() * 1.5)
    legend.setFont(large)  # the classroom layout's larger text
    qtbot.waitUntil(lambda: fits(legend))
