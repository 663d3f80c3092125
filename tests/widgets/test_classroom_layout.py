"""The Classroom layout (View → Classroom layout) at the projector sizes: the prompt, the drafters and the guide
tabbed in a left column as wide as the drafter panel needs, every chart in view without scrolling after a run, the
docks back as they were when it is left and never saved as the user's; presentation mode's status bar as large as
its stream's text and no small controls under its chart; the sampling inspector's acceptance strip with labels
that never overlap."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontInfo
from PySide6.QtWidgets import QApplication, QCheckBox, QLabel, QRadioButton

from app.widgets.classroom_layout import CHARTS_MAX_PERCENT
from app.widgets.inspector import AcceptStrip
from tests.widgets.fakes import FakeEngine
from tests.widgets.test_chart_grid import assert_every_plot_reachable, charts_after_a_run
from tests.widgets.test_window_layout import shown_window

PRESENTATION_STREAM_MIN_PX = 20  # the stream's least text size in presentation mode (app/widgets/presentation.py)


def classroom_window(qtbot, make_window, size):
    window = shown_window(make_window, size, FakeEngine())
    window.classroom_action.trigger()
    qtbot.waitUntil(lambda: window.controls_dock in window.tabifiedDockWidgets(window.drafters_dock))
    QApplication.processEvents()  # the docks are sized once the larger text is laid out
    return window


@pytest.mark.parametrize("size", [(1366, 768), (1600, 1000), (1920, 1080)])
def test_every_chart_is_in_view_without_scrolling_after_a_run(qtbot, make_window, size):
    window = classroom_window(qtbot, make_window, size)
    charts = charts_after_a_run(qtbot, window)
    area = charts.scroll
    qtbot.waitUntil(lambda: area.verticalScrollBar().maximum() == 0)  # the dock grows to the row once it is drawn
    assert area.horizontalScrollBar().maximum() == 0
    for rect in charts.cell_rects():
        assert area.viewport().rect().contains(rect), (rect, area.viewport().rect())
    assert min(charts.plot_heights()) >= 60
    assert_every_plot_reachable(charts)


@pytest.mark.parametrize("size", [(1024, 768), (1366, 768), (1600, 1000)])
def test_the_side_panels_share_a_left_column_as_wide_as_the_drafter_panel_needs(qtbot, make_window, size):
    window = classroom_window(qtbot, make_window, size)
    window.drafters_dock.raise_()
    qtbot.waitUntil(lambda: window.drafters.isVisible())
    left = Qt.DockWidgetArea.LeftDockWidgetArea
    assert window.dockWidgetArea(window.drafters_dock) == left == window.dockWidgetArea(window.guide_dock)
    area = window.drafters_dock.widget()
    assert area.horizontalScrollBar().maximum() == 0  # nothing to scroll sideways
    panel = window.drafters
    if size[0] >= 1366:  # at 1024 px the column keeps to SIDE_MAX_PERCENT, the panel a little under its wish
        assert panel.width() >= panel.sizeHint().width()
    for widget in [w for kind in (QCheckBox, QRadioButton, QLabel) for w in panel.findChildren(kind)]:
        if widget.isVisible() and not (isinstance(widget, QLabel) and widget.wordWrap()):
            assert widget.width() >= widget.sizeHint().width(), widget.text()  # no label cut
    assert window.token_view.width() > window.drafters_dock.width()  # the stream keeps the most of the width


def test_leaving_the_layout_puts_the_docks_back_and_it_is_never_saved(qtbot, make_window):
    window = classroom_window(qtbot, make_window, (1600, 1000))
    window.classroom_action.trigger()
    QApplication.processEvents()
    right = Qt.DockWidgetArea.RightDockWidgetArea
    assert window.dockWidgetArea(window.drafters_dock) == right
    assert window.controls_dock not in window.tabifiedDockWidgets(window.drafters_dock)
    window.classroom_action.trigger()
    qtbot.waitUntil(lambda: window.controls_dock in window.tabifiedDockWidgets(window.drafters_dock))
    window.close()  # saves the layout
    again = make_window(FakeEngine())
    QApplication.processEvents()
    assert again.dockWidgetArea(again.drafters_dock) == right
    assert again.controls_dock not in again.tabifiedDockWidgets(again.drafters_dock)


def test_presentation_mode_has_a_large_status_bar_and_no_small_bar_under_its_chart(qtbot, make_window):
    window = shown_window(make_window, (1024, 768), FakeEngine())
    window.presentation_action.trigger()
    window.presentation.show_view(1)
    QApplication.processEvents()
    assert QFontInfo(window.status.font()).pixelSize() >= PRESENTATION_STREAM_MIN_PX
    assert QFontInfo(window.status.message_label.font()).pixelSize() >= PRESENTATION_STREAM_MIN_PX
    assert window.status.height() >= window.status.sizeHint().height()  # its larger text is not cut
    assert window.presentation.charts.isVisible() and not window.presentation.charts.controls_bar.isVisible()
    window.presentation_action.trigger()
    QApplication.processEvents()
    assert QFontInfo(window.status.font()).pixelSize() < PRESENTATION_STREAM_MIN_PX
    assert window.charts.controls_bar.isVisible()  # the normal layout keeps the ASD budget, Compare and Clear


def overlapping(rects: dict) -> list[tuple[str, str]]:
    names = sorted(rects)
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:] if rects[a].intersects(rects[b])]


@pytest.mark.parametrize("u", [0.02, 0.5, 0.901, 0.99])
@pytest.mark.parametrize("scale", [1.0, 1.5])
def test_acceptance_strip_labels_never_overlap(qtbot, u, scale):
    strip = AcceptStrip()
    qtbot.addWidget(strip)
    font = QFont(QApplication.font())
    font.setPointSizeF(font.pointSizeF() * scale)
    strip.setFont(font)
    strip.set_values(0.549, u)
    strip.show()
    for width in (240, 320, 400, 700):
        strip.resize(width, strip.height())
        QApplication.processEvents()
        rects = strip.label_rects()
        assert "u" in rects and "mark" in rects
        assert not overlapping(rects), (width, overlapping(rects))
        for name, rect in rects.items():
            assert 0 <= rect.left() and rect.right() <= width and rect.bottom() <= strip.height(), (name, rect)
    strip.resize(400, strip.height())
    QApplication.processEvents()
    assert {"tick 0", "tick 1"} <= set(strip.label_rects())  # the ticks show where there is room


def test_the_race_tab_takes_the_room_its_panel_needs_and_gives_it_back(qtbot, make_window):
    window = classroom_window(qtbot, make_window, (1600, 1000))
    charts_height = window.charts_dock.height()
    window.race_dock.raise_()
    needed = window.race_view.minimumSizeHint().height()
    qtbot.waitUntil(lambda: window.race_dock.height() > charts_height)
    assert window.race_dock.height() <= 1000 * CHARTS_MAX_PERCENT // 100
    assert window.race_view.height() >= min(needed, window.race_dock.widget().viewport().height())
    window.charts_dock.raise_()
    qtbot.waitUntil(lambda: window.charts_dock.height() == charts_height)


def test_chosen_in_presentation_mode_it_applies_when_presentation_ends(qtbot, make_window):
    window = shown_window(make_window, (1600, 1000), FakeEngine())
    window.presentation_action.trigger()
    window.classroom_action.trigger()
    QApplication.processEvents()
    assert not window.classroom_docks.on  # presentation mode has no docks to arrange
    window.presentation_action.trigger()
    qtbot.waitUntil(lambda: window.controls_dock in window.tabifiedDockWidgets(window.drafters_dock))
    assert window.classroom_docks.on
    assert window.dockWidgetArea(window.drafters_dock) == Qt.DockWidgetArea.LeftDockWidgetArea


def test_reset_layout_keeps_the_classroom_arrangement_while_it_is_chosen(qtbot, make_window):
    window = classroom_window(qtbot, make_window, (1600, 1000))
    window.reset_layout_action.trigger()
    QApplication.processEvents()
    assert window.controls_dock in window.tabifiedDockWidgets(window.drafters_dock)
    window.classroom_action.trigger()  # leaving goes back to the reset (default) layout
    QApplication.processEvents()
    assert window.dockWidgetArea(window.drafters_dock) == Qt.DockWidgetArea.RightDockWidgetArea
    assert window.controls_dock not in window.tabifiedDockWidgets(window.drafters_dock)
