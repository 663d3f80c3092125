"""The colour legend above the text is never cut, however narrow the window or large the font; where the full
labels would take more lines it shows short ones (full ones and descriptions in tooltips), with every outcome's
colour key and the "Hide rejected" box following the last entry."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, QPoint, QRect, Qt
from PySide6.QtGui import QFont, QHelpEvent, QTextCursor
from PySide6.QtWidgets import QApplication, QToolTip

from app.widgets import token_style as ts
from app.widgets.legend import SHORT_LABELS, SHOWN, TokenLegend
from app.widgets.token_view import TREE_MARK
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import fragment_outcomes
from tests.widgets.test_window_layout import shown_window


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


# --- a compact legend at narrow widths and large fonts ------------------------------------------------------------

LEGEND_LINES_AT_1024_CLASSROOM = 3  # short labels, the box after the last: the token view keeps most of the height


def shown_legend(qtbot, width: int, scale: float = 1.0) -> TokenLegend:
    legend = TokenLegend()
    qtbot.addWidget(legend)
    font = QFont(legend.font())
    font.setPointSizeF(font.pointSizeF() * scale)
    legend.setFont(font)
    legend.resize(width, 60)
    legend.show()
    QApplication.processEvents()
    return legend


def entry_end(legend: TokenLegend, name: str) -> QRect:
    """The cursor's rectangle at the end of `name`'s entry."""
    document = legend.sample.document()
    start = document.toPlainText().index(legend.labels()[SHOWN.index(name)])
    cursor = QTextCursor(document)
    cursor.setPosition(start + len(legend.labels()[SHOWN.index(name)]))
    return legend.sample.cursorRect(cursor)


def assert_compact_and_whole(legend: TokenLegend) -> None:
    """Every outcome is keyed in its own format, nothing is cut, and the box follows the last entry."""
    assert fragment_outcomes(legend.sample) == set(SHOWN)
    assert fits(legend)
    box, area = legend.hide_rejected.geometry(), legend.sample.viewport().rect()
    assert legend.hide_rejected.isVisible() and area.contains(box), (box, area)
    last = entry_end(legend, SHOWN[-1])
    if legend.line_count() == 1:
        assert box.right() == area.right()  # one line: the box at the right end, as a wide legend has it
    else:
        assert last.top() <= box.center().y() <= last.bottom() or box.top() > last.bottom()
    assert box.left() >= last.right() or box.top() > last.bottom()  # never over an entry


def test_narrow_legend_shows_short_labels_on_fewer_lines_and_full_ones_in_tooltips(qtbot):
    wide = shown_legend(qtbot, 1400)
    assert not wide.short and wide.labels() == [ts.LABELS[name] for name in SHOWN] and wide.line_count() == 1
    assert_compact_and_whole(wide)

    narrow = shown_legend(qtbot, 283, scale=1.5)  # the token view's column at 1024x700 in the Classroom layout
    assert narrow.short and narrow.labels() == [SHORT_LABELS[name] for name in SHOWN]
    assert narrow.line_count() <= LEGEND_LINES_AT_1024_CLASSROOM
    assert_compact_and_whole(narrow)
    viewport = narrow.sample.viewport()
    for name in SHOWN:  # each entry tells its full label and what it means
        place = entry_end(narrow, name)
        point = QPoint(place.left() - 3, place.center().y())
        assert narrow.outcome_at(point) == name
        QApplication.sendEvent(viewport, QHelpEvent(QEvent.Type.ToolTip, point, viewport.mapToGlobal(point)))
        assert QToolTip.text() == f"<b>{ts.LABELS[name]}</b>: {ts.EXPLANATIONS[name]}"

    narrow.resize(1400, 60)  # wide again: the full labels on one line
    QApplication.processEvents()
    assert not narrow.short and narrow.line_count() == 1
    assert_compact_and_whole(narrow)


def test_hide_rejected_box_in_the_flow_still_toggles(qtbot):
    legend = shown_legend(qtbot, 283, scale=1.5)
    with qtbot.waitSignal(legend.sig_hide_rejected) as blocker:
        qtbot.mouseClick(legend.hide_rejected, Qt.MouseButton.LeftButton,
                         pos=QPoint(6, legend.hide_rejected.height() // 2))
    assert blocker.args == [True] and legend.hide_rejected.isChecked()


@pytest.mark.parametrize("classroom", [False, True])
def test_legend_in_the_window_at_1024x700(qtbot, make_window, classroom):
    window = shown_window(make_window, (1024, 700), FakeEngine())
    if classroom:
        window.classroom_action.trigger()
        QApplication.processEvents()
    legend = window.legend
    # the stream is wide enough at 1024 px for full labels on one line in normal text
    assert classroom or not legend.short or legend.line_count() == 1
    assert legend.line_count() <= (LEGEND_LINES_AT_1024_CLASSROOM if classroom else 2)
    assert_compact_and_whole(legend)
    assert window.token_view.height() > 2 * legend.height()  # the text, not the key, has the room


def test_legend_in_the_window_at_1600x1000_is_one_line_of_full_labels(qtbot, make_window):
    window = shown_window(make_window, (1600, 1000), FakeEngine())
    legend = window.legend
    assert not legend.short and legend.line_count() == 1
    assert_compact_and_whole(legend)


def test_the_legend_tooltip_explains_the_prompt_and_the_streams_marks_and_the_line_stays_one(qtbot):
    legend = shown_legend(qtbot, 1400)
    tip = legend.sample.toolTip()
    assert f"{ts.LABELS[ts.PROMPT]}</i>" in tip and ts.EXPLANATIONS[ts.PROMPT] in tip
    assert f"<b>{TREE_MARK}6</b>: " in tip and "branches" in tip  # the mark a tree pass gets in the stream
    assert "<b>⟂ " in tip and "changed here" in tip
    assert legend.line_count() == 1  # the entries on the line are the outcomes only
