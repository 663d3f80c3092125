"""The window at the sizes the project checks (1024x700 and 1600x1000): no leftover dock tab bar, a prompt panel
and a guide that never scroll sideways, the inspector's verdict in view, the Classroom layout within a small
screen, and messages that name the models as the status bar does."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QApplication, QDockWidget, QScrollArea, QTabBar

from app.engine.load_request import LoadRequest
from app.widgets.classroom_layout import CHARTS_MAX_PERCENT
from app.widgets.guide import GuidePanel
from app.widgets.inspector import COL_VERDICT
from tests.widgets.fakes import FAKE_SUMMARY, FakeEngine
from tests.widgets.helpers import RUN_MS, run_to_end
from tests.widgets.test_load_cancel import GatedLoad

SIZES = [(1024, 700), (1600, 1000)]


def shown_window(make_window, size, engine=None):
    """A window of this size, laid out and painted by plain event processing only: no event loop runs, so
    nothing Qt meant to delete later has been deleted yet (a real start-up's first paint comes that early)."""
    window = make_window()
    window.resize(*size)
    if engine is not None:
        window.set_engine(engine)
    QApplication.processEvents()
    assert window.size().toTuple() == size
    return window


def tabbed_groups(window) -> list[set[QDockWidget]]:
    groups: list[set[QDockWidget]] = []
    for dock in window.findChildren(QDockWidget):
        group = {dock, *window.tabifiedDockWidgets(dock)}
        if not dock.isFloating() and len(group) > 1 and group not in groups:
            groups.append(group)
    return groups


def assert_tab_bars_are_the_groups(window) -> None:
    """Every visible tab bar of the window is the bar of one tabbed dock group, right under the group's dock
    in front, and each group shows one bar."""
    groups = tabbed_groups(window)
    assert len(groups) == 2  # the bottom docks, and the drafters with the guide
    bars_of = {id(group): [] for group in map(frozenset, groups)}
    for bar in window.findChildren(QTabBar):
        if not bar.isVisible():
            continue
        titles = {bar.tabText(i) for i in range(bar.count())}
        group = next((g for g in groups if {d.windowTitle() for d in g} == titles), None)
        assert group is not None, f"a tab bar of no tabbed group: {sorted(titles)}"
        front = next(d for d in group if d.windowTitle() == bar.tabText(bar.currentIndex()))
        dock, place = front.geometry(), bar.geometry()
        assert dock.bottom() < place.top() <= dock.bottom() + 8, (sorted(titles), dock, place)
        assert place.left() < dock.right() and dock.left() < place.right(), (sorted(titles), dock, place)
        bars_of[id(frozenset(group))].append(bar)
    assert [len(bars) for bars in bars_of.values()] == [1, 1]


@pytest.mark.parametrize("size", SIZES)
def test_every_visible_tab_bar_belongs_to_a_tabbed_dock_group(qtbot, make_window, size):
    window = shown_window(make_window, size)
    assert_tab_bars_are_the_groups(window)
    window.guide_dock.raise_()
    QApplication.processEvents()
    assert_tab_bars_are_the_groups(window)


def test_no_leftover_tab_bar_after_restoring_a_layout_or_resetting_it(qtbot, make_window):
    first = shown_window(make_window, (1024, 700))
    first.save_settings()
    again = make_window()  # the saved layout is restored while the window is built
    QApplication.processEvents()
    assert_tab_bars_are_the_groups(again)
    again.reset_layout_action.trigger()
    QApplication.processEvents()
    assert_tab_bars_are_the_groups(again)


def prompt_area(window) -> QScrollArea:
    area = window.controls_dock.widget()
    assert isinstance(area, QScrollArea) and area.widget() is window.controls
    return area


def assert_in_view(area: QScrollArea, widget) -> None:
    """The whole widget shows in the scroll area's viewport as it is scrolled now."""
    shown = QRect(widget.mapTo(area.viewport(), widget.rect().topLeft()), widget.size())
    assert area.viewport().rect().contains(shown), (widget, shown, area.viewport().rect())


@pytest.mark.parametrize("size", SIZES)
def test_prompt_panel_fits_its_dock_without_sideways_scrolling(qtbot, make_window, size):
    window = shown_window(make_window, size, FakeEngine())  # the bundled models' hint shows under the prompt
    controls, area = window.controls, prompt_area(window)
    assert controls.model_hint.isVisible()
    assert controls.minimumSizeHint().width() <= window.controls_dock.width()
    assert not area.horizontalScrollBar().isVisible()
    assert controls.width() <= area.viewport().width()
    for widget in (controls.generate_button, controls.stop_button, controls.pause_button, controls.step_button,
                   controls.max_tokens, controls.seed, controls.model_hint):
        assert_in_view(area, widget)  # nothing below the fold or cut at the right, also at 1024x700


def test_classroom_layout_fits_1024x700(qtbot, make_window):
    window = shown_window(make_window, (1024, 700), FakeEngine())
    window.classroom_action.trigger()
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(40)
    run_to_end(qtbot, window)
    QApplication.processEvents()
    assert window.width() == 1024 and window.minimumSizeHint().width() <= 1024
    area = prompt_area(window)
    assert not area.horizontalScrollBar().isVisible()
    assert window.controls.prompt.height() >= window.controls.prompt.minimumHeight()
    assert_in_view(area, window.controls.generate_button)  # Generate without scrolling


def test_classroom_layout_keeps_six_prompt_lines_and_the_whole_panel_at_1600x1000(qtbot, make_window):
    window = shown_window(make_window, (1600, 1000), FakeEngine())
    window.classroom_action.trigger()
    qtbot.waitUntil(lambda: window.charts_dock.height() <= 1000 * CHARTS_MAX_PERCENT // 100 + 2)
    QApplication.processEvents()
    prompt, area = window.controls.prompt, prompt_area(window)
    assert prompt.viewport().height() >= 6 * prompt.fontMetrics().lineSpacing()
    for widget in (window.controls.generate_button, window.controls.max_tokens, window.controls.seed):
        assert_in_view(area, widget)


@pytest.mark.parametrize("size", SIZES)
def test_guide_wraps_its_text_in_the_dock(qtbot, store, make_window, size):
    store.setValue("guide/seen", False)  # first start: the guide is offered
    window = shown_window(make_window, size)
    window.show_guide()
    QApplication.processEvents()
    assert window.guide_dock.isVisible() and isinstance(window.guide_dock.widget(), GuidePanel)  # scrolls itself
    browser = window.guide.browser
    assert browser.document().size().width() <= browser.viewport().width()
    assert browser.horizontalScrollBar().maximum() == 0


@pytest.mark.parametrize("verify", ["sample", "asd"])
def test_inspector_verdict_column_is_in_view_at_1024x700(qtbot, make_window, verify):
    window = shown_window(make_window, (1024, 700), FakeEngine())
    window.settings_model.use(verify=verify)
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(20)
    run_to_end(qtbot, window)
    window.token_view.select_pass(1)
    QApplication.processEvents()
    table = window.inspector.table
    assert window.inspector.inspection is not None and window.inspector.inspection.event.verify == verify
    assert table.rowCount() > 0 and not table.isColumnHidden(COL_VERDICT)
    left = table.columnViewportPosition(COL_VERDICT)
    assert 0 <= left and left + table.columnWidth(COL_VERDICT) <= table.viewport().width()
    assert table.item(0, COL_VERDICT).text()


def test_cancelled_load_names_the_models_as_the_status_bar_does(qtbot, make_window, tmp_path):
    engine = FakeEngine()
    engine.summary = dataclasses.replace(FAKE_SUMMARY, target_name=str(tmp_path / "assets" / "models" / "demo" /
                                                                       "target"))
    window = make_window(engine)
    load = GatedLoad()
    window.runs.factory = load
    loader = window.load_models_async(LoadRequest(target="elsewhere"))
    assert loader is not None and window.cancel_load()
    assert "Load cancelled; still using demo/target." in window.banner.text()
    assert str(tmp_path) not in window.banner.text() and str(tmp_path) not in window.status.currentMessage()
    load.gate.set()  # the thread ends at its next step (or has already: it may not have reached the load)
    qtbot.waitUntil(loader.isFinished, timeout=RUN_MS)
