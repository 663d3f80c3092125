"""The run charts show every plot without scrolling where an arrangement fits: three to a row, else two, else all
five in one row with titles and legends wrapped to their columns (1024x700, 1366x768); where none fits they reflow
to the dock's width (three, two, one to a row) and the grid tells its scroll area its real minimum size, so no plot
is drawn past the dock's edge (the Classroom layout's larger text at 1024x700 included); the normal layout at
1600x1000 keeps three to a row."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.main_window import CLASSROOM_FONT_SCALE
from app.widgets.charts import PLOT_COUNT, RunCharts
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import run_to_end
from tests.widgets.test_window_layout import shown_window

THREE_TO_A_ROW = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def assert_every_plot_reachable(charts: RunCharts) -> None:
    """Every plot lies within the grid widget, which the scroll area shows whole or scrolls through."""
    grid, area = charts.layout_widget, charts.scroll
    for rect in charts.cell_rects():
        assert grid.rect().contains(rect), (rect, grid.rect())
    assert grid.width() - area.viewport().width() == area.horizontalScrollBar().maximum()
    assert grid.height() - area.viewport().height() == area.verticalScrollBar().maximum()
    # Honest: the grid is never smaller than what its plots and legends need.
    needed = grid.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize)
    assert grid.minimumWidth() >= needed.width() and grid.minimumHeight() >= needed.height()


SHORT_PX = 100  # a charts widget this short (it keeps its least height) fits no arrangement at LARGE_TEXT
LARGE_TEXT = 2.0


def charts_at(qtbot, width: int, scale: float, height: int = SHORT_PX) -> RunCharts:
    charts = RunCharts()
    qtbot.addWidget(charts)
    charts.set_text_scale(scale)
    charts.resize(width, height)
    charts.show()
    QApplication.processEvents()
    return charts


def charts_after_a_run(qtbot, window) -> RunCharts:
    """The window's charts once a 40-token run has been drawn in every plot."""
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(40)
    run_to_end(qtbot, window)
    charts = window.charts
    qtbot.waitUntil(lambda: set(charts.point_counts().values()) == {len(window.session.passes)})
    QApplication.processEvents()
    return charts


def test_classroom_charts_fit_the_dock_at_1024x700_after_an_asd_run(qtbot, make_window):
    window = shown_window(make_window, (1024, 700), FakeEngine())
    window.classroom_action.trigger()
    window.settings_model.use(verify="asd")
    charts = charts_after_a_run(qtbot, window)
    assert charts.budget_state == "on" and charts.ledger_spent.getData()[0] is not None
    assert charts.scroll.horizontalScrollBar().maximum() == 0  # no sideways scrolling
    assert_every_plot_reachable(charts)
    ledger = charts.cell_rects()[2]
    assert ledger.right() < charts.scroll.viewport().width()  # the ledger is no longer drawn past the edge
    assert min(charts.plot_heights()) > 0


def test_a_tall_dock_takes_three_to_a_row_and_a_short_one_a_single_row(qtbot):
    charts = charts_at(qtbot, 1600, 1.0, height=900)
    assert charts.columns == 3 and charts.plot_cells() == THREE_TO_A_ROW
    charts.resize(1600, 330)
    QApplication.processEvents()
    assert charts.columns == PLOT_COUNT and charts.plot_cells() == [(0, i) for i in range(PLOT_COUNT)]
    assert charts.scroll.horizontalScrollBar().maximum() == 0
    assert_every_plot_reachable(charts)


def test_grid_reflows_to_the_width_and_scrolls_sideways_only_below_one_plot(qtbot):
    """Text so large (twice the normal) that no arrangement fits the widget's least height, nor five plots
    without their legends: the grid reflows to the width and scrolls."""
    charts = charts_at(qtbot, 1600, LARGE_TEXT)
    assert charts.columns == 3 and charts.plot_cells() == THREE_TO_A_ROW
    assert_every_plot_reachable(charts)
    for width, columns in ((1300, 2), (800, 1)):
        charts.resize(width, SHORT_PX)
        QApplication.processEvents()
        assert charts.columns == columns
        assert charts.plot_cells() == [divmod(i, columns) for i in range(PLOT_COUNT)]  # reading order
        assert charts.scroll.horizontalScrollBar().maximum() == 0
        assert_every_plot_reachable(charts)
    charts.resize(300, SHORT_PX)  # not even one plot fits across: the area scrolls sideways to it
    QApplication.processEvents()
    assert charts.columns == 1 and charts.scroll.horizontalScrollBar().maximum() > 0
    assert_every_plot_reachable(charts)
    charts.resize(1600, SHORT_PX)
    QApplication.processEvents()
    assert charts.columns == 3 and charts.plot_cells() == THREE_TO_A_ROW
    assert_every_plot_reachable(charts)


def test_larger_text_keeps_every_plot_in_one_row_of_a_short_dock(qtbot):
    charts = charts_at(qtbot, 1024, 1.0)  # the widget's least height
    assert charts.columns == PLOT_COUNT
    charts.set_text_scale(CLASSROOM_FONT_SCALE)
    QApplication.processEvents()
    assert charts.columns == PLOT_COUNT  # the plots in view, their legends a scroll away
    assert charts.scroll.horizontalScrollBar().maximum() == 0
    assert_every_plot_reachable(charts)
    charts.set_text_scale(1.0)
    QApplication.processEvents()
    assert charts.columns == PLOT_COUNT
    assert_every_plot_reachable(charts)


@pytest.mark.parametrize("size", [(1024, 700), (1024, 768), (1366, 768), (1600, 1000), (1920, 1080)])
def test_every_plot_shows_without_scrolling_after_a_run(qtbot, make_window, size):
    """A short dock (1024x700, 1366x768) takes the five plots in one row rather than showing the first row only."""
    window = shown_window(make_window, size, FakeEngine())
    charts = charts_after_a_run(qtbot, window)
    area = charts.scroll
    assert area.verticalScrollBar().maximum() == 0 and area.horizontalScrollBar().maximum() == 0
    for rect in charts.cell_rects():
        assert area.viewport().rect().contains(rect), (rect, area.viewport().rect())
    assert min(charts.plot_heights()) > 0
    assert_every_plot_reachable(charts)


def test_a_single_row_wraps_titles_and_legends_to_their_columns(qtbot):
    charts = charts_at(qtbot, 1024, 1.0, height=260)
    assert charts.columns == PLOT_COUNT and charts.scroll.verticalScrollBar().maximum() == 0
    cells = charts.cell_rects()
    for left, right in zip(cells, cells[1:], strict=False):
        assert left.right() < right.left()  # side by side, none over its neighbour
    for plot, cell in zip(charts.plots, cells, strict=True):
        for label in (plot.titleLabel, plot.legend_label):
            text = charts.layout_widget.mapFromScene(label.mapRectToScene(label.itemRect())).boundingRect()
            assert cell.adjusted(-1, -1, 1, 1).contains(text), (plot.plain_title, text, cell)
        assert not plot.getAxis("bottom").label.isVisible()  # "pass" is said once, by the titles
    heights = charts.plot_heights()
    assert max(heights) - min(heights) <= 1  # the legends of a row are as tall as each other: the plots line up
    charts.resize(1024, 700)  # room for two rows: three to a row, the titles whole on one line
    QApplication.processEvents()
    assert charts.columns == 3
    assert all("<br>" not in plot.titleLabel.text for plot in charts.plots)
    assert all(plot.getAxis("bottom").label.isVisible() for plot in charts.plots)


def test_a_row_too_short_for_its_legends_keeps_every_plot_in_view(qtbot):
    """The Classroom layout's text in a small window: five in a row, the plots in view, the legends a scroll away."""
    charts = charts_at(qtbot, 1024, CLASSROOM_FONT_SCALE, height=300)
    area = charts.scroll
    assert charts.columns == PLOT_COUNT and area.verticalScrollBar().maximum() > 0
    assert area.horizontalScrollBar().maximum() == 0
    for plot in charts.plots:
        view = plot.getViewBox()
        shown = charts.layout_widget.mapFromScene(view.sceneBoundingRect()).boundingRect()
        assert area.viewport().rect().contains(shown), (plot.plain_title, shown, area.viewport().rect())
    assert_every_plot_reachable(charts)
