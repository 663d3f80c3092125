"""Views that are never stale and never broken: charts behind a tab, the selected pass, the layout at small
and large sizes, legends, the ASD ledger, change markers and slow motion."""

from __future__ import annotations

import time

import pytest
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QApplication

from app.widgets.charts import ALPHA_BOTTOM, ALPHA_TOP, MIN_DOCK_PX
from app.widgets.token_view import TokenView
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import run_to_end, wait_for_passes
from tests.widgets.test_views import fake_session

MIN_PLOT_PX = 60  # each plot's data area at least, at any window size from 1024x700


def test_charts_show_this_run_when_their_tab_is_raised(qtbot, fake_window):
    window = fake_window
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(20)
    run_to_end(qtbot, window)
    qtbot.waitUntil(lambda: window.charts.point_counts()["alpha"] == len(window.session.passes))
    first_run = len(window.session.passes)

    window.inspector_dock.raise_()  # the standard step-mode flow: the inspector is in front
    window.controls.max_tokens.setValue(80)
    run_to_end(qtbot, window)
    passes = len(window.session.passes)
    assert passes > first_run
    assert window.charts.point_counts()["alpha"] != passes  # drawing behind a tab is skipped

    with qtbot.waitSignal(window.charts_dock.visibilityChanged, timeout=2_000):
        window.charts_dock.raise_()
    qtbot.waitUntil(lambda: set(window.charts.point_counts().values()) == {passes}, timeout=2_000)


def test_selected_pass_highlight_ends_where_the_pass_ends(qtbot):
    session = fake_session(qtbot, 5)
    view = TokenView()
    qtbot.addWidget(view)
    view.set_session(session)
    view.show()
    session.flush()
    view.select_pass(4)  # Step: the newest pass is inspected...
    events = FakeEngine().generate("prompt ", session_live(session), _no_control())
    next(events)
    for _ in range(12):  # ... then Run: more passes are appended right after it
        session.on_event(_next_pass(events, session))
    session.flush()

    first_after = next(i for i in range(view.token_count) if view.token_info(i)[0] is session.passes[5])
    (selection,) = view.extraSelections()
    assert selection.cursor.selectionStart() == view.token_start(
        next(i for i in range(view.token_count) if view.token_info(i)[0] is session.passes[4]))
    assert selection.cursor.selectionEnd() == view.token_start(first_after)


def session_live(session):
    from app.engine.settings import DecodeSettings, LiveSettings

    return LiveSettings(DecodeSettings(verify="asd", max_new_tokens=10**6, seed=len(session.passes)))


def _no_control():
    from app.engine.settings import GenerationControl

    return GenerationControl()


def _next_pass(events, session):
    """The fake engine's next pass, numbered after the session's passes."""
    import dataclasses

    event = next(events)
    return dataclasses.replace(event, index=len(session.passes))


def _settle(qtbot, window, width: int, height: int) -> None:
    window.resize(width, height)
    qtbot.waitUntil(lambda: window.width() == width and window.height() == height, timeout=2_000)
    QApplication.processEvents()


@pytest.mark.parametrize("small", [(1024, 700)])
def test_plots_keep_a_minimum_height_down_to_1024x700_and_back(qtbot, fake_window, small):
    window = fake_window
    for size in (small, (1600, 1000), (1920, 1080)):
        _settle(qtbot, window, *size)
        qtbot.waitUntil(lambda: min(window.charts.plot_heights()) >= MIN_PLOT_PX, timeout=2_000)
        assert window.charts_dock.height() >= MIN_DOCK_PX


def test_reset_layout_brings_every_dock_back(qtbot, fake_window):
    window = fake_window
    window.charts_dock.hide()
    window.guide_dock.hide()
    window.drafters_dock.setFloating(True)
    window.reset_layout_action.trigger()
    for dock in (window.charts_dock, window.guide_dock, window.drafters_dock, window.controls_dock):
        assert not dock.isHidden() and not dock.isFloating()
    assert window.inspector_dock in window.tabifiedDockWidgets(window.charts_dock)


def test_classroom_layout_enlarges_fonts_and_goes_back(qtbot, fake_window):
    window = fake_window
    normal = window.token_view.font().pointSizeF()
    window.classroom_action.trigger()
    assert window.token_view.font().pointSizeF() == pytest.approx(1.5 * normal)
    window.classroom_action.trigger()
    assert window.token_view.font().pointSizeF() == pytest.approx(normal)


def test_legend_lists_only_this_runs_drafters_and_alpha_stays_0_to_1(qtbot, fake_window):
    window = fake_window
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(30)
    window.settings_model.use(drafters=("draft-model",))
    run_to_end(qtbot, window)
    window.charts.refresh()
    assert "draft-model" in window.charts.legend_names(window.charts.alpha_plot)
    window.settings_model.use(drafters=("prompt-lookup",))
    run_to_end(qtbot, window)
    window.charts.refresh()
    names = window.charts.legend_names(window.charts.alpha_plot)
    assert "prompt-lookup" in names and "draft-model" not in names
    low, high = window.charts.alpha_plot.viewRange()[1]
    assert low <= ALPHA_BOTTOM < 0 and 1 < ALPHA_TOP <= high  # 0..1 with room for the 0.0 and 1.0 ticks


def test_ledger_says_asd_off_and_when_the_budget_is_spent(qtbot, fake_window):
    window = fake_window
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(40)
    window.settings_model.use(verify="greedy")
    run_to_end(qtbot, window)
    window.charts.refresh()
    assert window.charts.budget_state == "off" and window.charts.budget_note.text() == "ASD off"
    window.drafters.budget.setValue(0.5)  # the fake engine spends 0.1 per exception
    window.drafters.set_rule("asd")
    run_to_end(qtbot, window)
    window.charts.refresh()
    assert window.charts.budget_state == "spent"
    assert "strict greedy" in window.charts.budget_note.text()
    assert "exceptions" in window.charts.budget_note.text() and "of B = 0.5 left" in window.charts.budget_note.text()


@pytest.mark.parametrize("size", [(1024, 700), (1600, 1000)])
def test_the_asd_budget_gauge_and_its_words_fit_on_one_line(qtbot, fake_window, size):
    window = fake_window
    window.resize(*size)
    window.charts_dock.raise_()
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(40)
    window.drafters.budget.setValue(0.5)  # spent within the run: the longest words the note has
    window.drafters.set_rule("asd")
    run_to_end(qtbot, window)
    window.charts.refresh()
    charts = window.charts
    assert charts.budget_state == "spent"
    gauge, note = charts.budget_gauge, charts.budget_note
    assert not gauge.isTextVisible()  # nothing in the bar to run over its fill or be clipped
    qtbot.waitUntil(lambda: note.height() >= note.heightForWidth(note.width()))  # laid out: never clipped
    words = QTextDocument()
    words.setDefaultFont(note.font())
    words.setDocumentMargin(0)
    words.setHtml(note.text())
    assert words.idealWidth() <= note.contentsRect().width()  # one line, no wrap
    assert note.height() < 2 * note.fontMetrics().lineSpacing()
    assert gauge.height() >= gauge.sizeHint().height()
    row = [charts.budget_title, gauge, note, charts.clear_button]
    for left, right in zip(row, row[1:], strict=False):
        assert left.geometry().right() < right.geometry().left()


def test_a_change_of_k_mid_run_is_marked_in_the_charts_and_the_text(qtbot, make_window):
    window = make_window(FakeEngine(pass_delay_s=0.01))
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(100_000)
    k = window.live.get().k
    assert window.start_generation()
    wait_for_passes(qtbot, window, 5)
    window.settings_model.use(k=k + 2)
    qtbot.waitUntil(lambda: bool(window.session.changes), timeout=5_000)
    with qtbot.waitSignal(window.sig_run_finished, timeout=10_000):
        window.stop_generation()
    assert window.session.changes[0].text == f"K {k} → {k + 2}"
    window.charts.refresh()
    assert window.charts.marker_count() == len(window.session.changes)
    qtbot.waitUntil(lambda: window.token_view.change_marks() == [f"⟂ K {k} → {k + 2}"], timeout=2_000)


def test_slow_motion_limits_the_pass_rate(qtbot, fake_window):
    window = fake_window
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(100_000)
    window.speed.set_rate(10.0)  # passes per second
    started = time.monotonic()
    assert window.start_generation()
    wait_for_passes(qtbot, window, 5)
    elapsed = time.monotonic() - started
    with qtbot.waitSignal(window.sig_run_finished, timeout=10_000):
        window.stop_generation()
    assert elapsed >= 4 * 0.1 * 0.9  # four intervals between five passes; at full speed: milliseconds
