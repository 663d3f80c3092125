"""Issue 34's classroom: presentation mode, one pass per line, and the defects a live demo trips over
(a stale inspector, Next pass after Resume, the change marker's look, the context check, greedy tooltips)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontInfo
from PySide6.QtWidgets import QApplication, QMenu

from app.engine.errors import ContextTooLongError
from app.engine.events import ACCEPTED, BONUS, REJECTED, RESAMPLED, TARGET
from app.widgets import token_style as ts
from app.widgets.inspector import EMPTY_HEADER
from app.widgets.presentation import TEXT_ONLY
from app.widgets.token_view import tooltip_text
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import RUN_MS, run_to_end, wait_for_passes

SIZES = ((1024, 768), (1366, 768), (1600, 1000), (1920, 1080))


class TooLongEngine(FakeEngine):
    """Refuses every prompt as the real engine refuses one its context cannot hold."""

    def generate(self, prompt, live, control, chat_template=False):
        raise ContextTooLongError("the prompt has 5123 tokens but the model's context holds 512; shorten the prompt.")


# ---------------------------------------------------------------- defect 4: the inspector after a new run


def test_inspector_forgets_the_previous_run_when_a_new_one_begins(qtbot, make_window):
    window = make_window(FakeEngine())
    window.controls.prompt.setPlainText("the cat")
    run_to_end(qtbot, window)
    window.token_view.select_pass(2)
    assert window.inspector.header.text() != EMPTY_HEADER and window.inspector.table.rowCount() > 0
    window.settings_model.use(k=2)
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        window.step_mode_action.setChecked(True)
        assert window.start_generation()
        assert window.inspector.header.text() == EMPTY_HEADER  # nothing of the previous run's pass is left
        assert window.inspector.inspection is None
        window.stop_generation()


# ---------------------------------------------------------------- defect 5: Next pass after Resume


def test_next_pass_is_enabled_once_later_passes_arrive_after_resume(qtbot, make_window):
    window = make_window(FakeEngine(pass_delay_s=0.01))
    window.controls.prompt.setPlainText("the cat")
    window.controls.max_tokens.setValue(60)
    window.step_mode_action.setChecked(True)
    window.step()
    qtbot.waitUntil(lambda: window.inspector.inspection is not None, timeout=RUN_MS)
    assert not window.inspector.next_button.isEnabled()  # the first pass is the last one there is
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        window.run_on()  # Resume
    window.session.flush()
    assert len(window.session.passes) > 1
    assert window.inspector.next_button.isEnabled()
    window.inspector.next_button.click()
    assert window.inspector.inspection.event.index == 1


# ---------------------------------------------------------------- defect 6: the change marker


def test_a_change_marker_does_not_look_like_generated_text(qtbot, make_window):
    window = make_window(FakeEngine(pass_delay_s=0.01))
    window.controls.prompt.setPlainText("the cat")
    window.controls.max_tokens.setValue(400)
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        assert window.start_generation()
        wait_for_passes(qtbot, window, 3)
        window.settings_model.use(drafters=("prompt-lookup",))
        wait_for_passes(qtbot, window, len(window.session.passes) + 3)
        window.stop_generation()
    window.session.flush()
    view = window.token_view
    assert any("prompt-lookup" in mark for mark in view.change_marks())
    marker = _format_of_mark(view)
    resampled = view.style_of(ts.RESAMPLED)
    assert marker.fontWeight() < 600 and not marker.fontItalic() and ts.outcome_of(marker) is None
    assert marker.foreground().color() != resampled.foreground().color()
    assert marker.background().color().alpha() > 0  # a box around it


def _format_of_mark(view):
    found = view.document().find("⟂")  # a cursor selecting the marker's sign
    assert not found.isNull()
    return found.charFormat()


# ---------------------------------------------------------------- defect 7: the context


def test_a_too_long_prompt_is_refused_in_plain_words_and_the_previous_output_stays(qtbot, make_window):
    window = make_window(FakeEngine())
    window.controls.prompt.setPlainText("the cat")
    run_to_end(qtbot, window)
    window.session.flush()
    shown = window.token_view.toPlainText()
    passes = len(window.session.passes)
    assert shown and passes
    window.set_engine(TooLongEngine())
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        assert window.start_generation()
    qtbot.waitUntil(lambda: len(window.session.passes) == passes, timeout=RUN_MS)
    message = window.banner.text()
    assert "ContextTooLongError" not in message and ".." not in message and ". ." not in message
    assert "5123 tokens" in message and "shorten the prompt" in message and "previous output is kept" in message
    assert window.token_view.toPlainText() == shown


def test_max_new_tokens_is_limited_by_the_models_context(qtbot, make_window):
    from dataclasses import replace

    engine = FakeEngine()
    engine.summary = replace(engine.summary, context_length=512)
    window = make_window(engine)
    window.controls.max_tokens.setValue(99_999)
    assert window.controls.max_tokens.value() == 512


# ---------------------------------------------------------------- defect 10: greedy tooltips


def test_a_rejected_greedy_draft_is_explained_by_the_argmax_not_p_over_q(qtbot, real_window):
    real_window.settings_model.use(drafters=("draft-model",), k=4, verify="greedy")
    run_to_end(qtbot, real_window)
    rejected = [(event, token) for event in real_window.session.passes for token in event.drafted
                if token.outcome == REJECTED]
    accepted = [(event, token) for event in real_window.session.passes for token in event.drafted
                if token.outcome == ACCEPTED]
    assert rejected, "the tiny random pair rejects some drafts"
    for event, token in rejected + accepted:
        tip = tooltip_text(event, token)
        assert "p/q" not in tip and "argmax" in tip
    assert "not the target's most likely token" in tooltip_text(*rejected[0])


# ---------------------------------------------------------------- one pass per line


def test_one_pass_per_line_shows_each_pass_as_a_row_in_figure_1_order(qtbot, real_window):
    real_window.settings_model.use(drafters=("draft-model",), k=3, verify="greedy")
    real_window.pass_rows_action.setChecked(True)
    run_to_end(qtbot, real_window)
    real_window.session.flush()
    rows = real_window.token_view.rows()
    passes = real_window.session.passes
    assert len(rows) == len(passes)
    order = {ACCEPTED: 0, ts.ASD_EXCEPTION: 0, REJECTED: 1, RESAMPLED: 2, BONUS: 2, TARGET: 2}
    for row, event in zip(rows, passes, strict=True):
        assert row == sorted(row, key=order.__getitem__), row  # accepted, then struck, then the target's token
        assert row.count(ACCEPTED) == sum(t.outcome == ACCEPTED for t in event.drafted)
        if event.appended is not None:
            assert row[-1] == event.appended.kind
    real_window.pass_rows_action.setChecked(False)
    assert real_window.token_view.rows() == []  # the flowing text again


# ---------------------------------------------------------------- presentation mode


@pytest.mark.parametrize("size", ((1600, 1000),))
def test_presentation_mode_is_large_and_keyboard_driven(qtbot, make_window, size):
    window = make_window(FakeEngine())
    window.resize(*size)
    window.controls.prompt.setPlainText("the cat")
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)  # shortcuts reach the active window
    window.presentation_action.trigger()
    assert window.presenting and not window.controls_dock.isVisible() and not window.charts_dock.isVisible()
    stream = window.presentation.stream
    assert QFontInfo(stream.font()).pixelSize() >= 20
    charts = window.presentation.charts
    for plot in charts.plots:
        assert QFontInfo(plot.getAxis("bottom").style["tickFont"]).pixelSize() >= 16
    window.step_mode_action.setChecked(True)
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        qtbot.keyClick(stream, Qt.Key.Key_Space)  # starts a paused run and runs one pass
        qtbot.waitUntil(lambda: len(window.session.passes) == 1, timeout=RUN_MS)
        qtbot.keyClick(stream, Qt.Key.Key_Space)
        qtbot.waitUntil(lambda: len(window.session.passes) == 2, timeout=RUN_MS)
        window.stop_generation()
    qtbot.waitUntil(lambda: window.inspector.inspection is not None, timeout=RUN_MS)
    assert window.inspector.inspection.event.index == 1
    qtbot.keyClick(stream, Qt.Key.Key_Left)
    assert window.inspector.inspection.event.index == 0
    qtbot.keyClick(stream, Qt.Key.Key_Right)
    assert window.inspector.inspection.event.index == 1
    qtbot.keyClick(stream, Qt.Key.Key_2)
    assert window.presentation.view == 2 and window.presentation.charts.isVisible()
    qtbot.keyClick(stream, Qt.Key.Key_0)
    assert window.presentation.view == TEXT_ONLY and not window.presentation.charts.isVisible()
    qtbot.keyClick(stream, Qt.Key.Key_R)
    assert stream.pass_rows and len(stream.rows()) == 2
    qtbot.keyClick(stream, Qt.Key.Key_Escape)
    assert not window.presenting and window.controls_dock.isVisible()
    qtbot.keyClick(window.controls.prompt, Qt.Key.Key_Space)  # typing works again: space is no shortcut now
    assert window.controls.prompt_text.count(" ") == 2


@pytest.mark.parametrize("size", SIZES)
def test_presentation_mode_clips_nothing(qtbot, make_window, size):
    window = make_window(FakeEngine())
    window.resize(*size)
    window.presentation_action.trigger()
    window.presentation.show_view(1)
    QApplication.processEvents()
    page = window.presentation
    for part in (page.stream, page.charts, page.title, page.hint):
        rect = part.geometry()
        assert part.isVisible() and rect.width() > 200 and rect.height() > 0, (part.objectName(), rect)
        assert page.rect().contains(rect), (part.objectName(), rect, page.rect())
    assert page.charts.height() >= 250 and page.stream.height() >= 150


def test_ctrl_q_during_a_run_asks_first(qtbot, make_window):
    window = make_window(FakeEngine(pass_delay_s=0.01))
    window.controls.prompt.setPlainText("the cat")
    window.controls.max_tokens.setValue(10_000)
    asked = []
    window.confirm_quit = lambda: asked.append(True) or False  # the user answers No
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        assert window.start_generation()
        assert not window.request_quit()  # what Ctrl+Q does
        assert asked and window.isVisible() and window.is_generating
        window.stop_generation()


# ---------------------------------------------------------------- the guided lesson in the window


def test_the_lesson_runs_a_step_live_and_points_at_the_pass_its_sentence_is_about(qtbot, real_window):
    from app.teaching.lesson import STEPS, LessonRun, explain_step

    window = real_window
    window.lesson_action.trigger()
    assert window.lesson_dock.isVisible()
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        window.lesson.run_button.click()
    qtbot.waitUntil(lambda: window.lesson.explanation is not None, timeout=RUN_MS)
    explanation = window.lesson.explanation
    run = LessonRun(window.session.start.settings, tuple(window.session.passes), window.session.end)
    assert explanation == explain_step(STEPS[0], run, {})
    assert window.lesson.sentence.text().startswith(f"Pass {explanation.pass_index}:")
    assert window.inspector.inspection.event.index == explanation.pass_index  # the pass it speaks of, shown
    passes = len(window.session.passes)
    window.lesson.next_button.click()  # step 2 has the same settings: the same run is explained, none is started
    assert not window.is_generating and len(window.session.passes) == passes
    assert window.lesson.explanation == explain_step(STEPS[1], run, {})


# ---------------------------------------------------------------- out-of-range fields


def test_an_out_of_range_number_is_reported_not_silently_replaced(qtbot, fake_window):
    panel = fake_window.drafters
    spin = panel.k_spin
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin.lineEdit(), "1000")
    assert spin.range_error is not None and "is out of range" in spin.range_error  # said at "100" already
    assert panel.error.text() == spin.range_error and "K must be from 1 to" in panel.error.text()
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin.lineEdit(), "6")
    assert spin.range_error is None and not panel.error.text()
    fields = fake_window.controls.max_tokens
    fields.lineEdit().selectAll()
    qtbot.keyClicks(fields.lineEdit(), "0")
    assert fields.range_error is not None and fields.range_error.startswith("Max new tokens must be from 1")


def test_asd_knobs_that_make_it_strict_greedy_are_said_beside_them(qtbot, fake_window):
    panel = fake_window.drafters
    panel.set_rule("asd")
    panel.gate.setValue(5.0)
    panel.cap.setValue(0)
    assert not panel.asd_note.isHidden() and "M = 0" in panel.asd_note.text()
    assert "strict greedy" in panel.asd_note.text()
    panel.cap.setValue(2)
    assert panel.asd_note.isHidden()
    panel.cap.setValue(0)
    panel.set_rule("greedy")
    assert panel.asd_note.isHidden()  # about ASD only


def test_menus_are_enlarged_in_presentation_mode_and_in_the_classroom_layout(qtbot, fake_window):
    window = fake_window
    menus = [window.menuBar(), *window.menuBar().findChildren(QMenu)]
    assert len(menus) >= 4  # the bar, File, Edit, View, Help
    normal = QApplication.font().pointSizeF()
    window.presentation_action.trigger()
    assert all(menu.font().pointSizeF() >= 1.5 * normal for menu in menus)
    window.presentation_action.trigger()
    assert all(menu.font().pointSizeF() == normal for menu in menus)
    window.classroom_action.trigger()
    assert all(menu.font().pointSizeF() == window.font().pointSizeF() > normal for menu in menus)


def test_speed_and_one_pass_per_line_are_remembered(qtbot, make_window):
    window = make_window(FakeEngine())
    window.speed.set_rate(2.0)
    window.pass_rows_action.setChecked(True)
    window.close()  # saves
    again = make_window(FakeEngine())
    assert again.speed.rate == 2.0 and again.speed.interval_s == 0.5
    assert again.pass_rows_action.isChecked() and again.token_view.pass_rows


def test_the_status_bar_names_the_drafter_in_use(qtbot, fake_window):
    fake_window.settings_model.use(drafters=("prompt-lookup",))
    assert "prompt-lookup" in fake_window.status.models_label.text()
    fake_window.settings_model.use(drafters=("draft-model",))
    assert "fake-draft" in fake_window.status.models_label.text()


def test_help_lists_the_shortcuts_of_presentation_mode(qtbot, fake_window):
    box = fake_window.show_shortcuts()
    qtbot.addWidget(box)
    for words in ("Ctrl+Enter", "F11", "Space", "one pass per line"):
        assert words in box.text()


def test_the_race_headline_is_larger_than_its_body_text_in_both_layouts(qtbot, fake_window):
    view = fake_window.race_view
    for classroom in (False, True):
        fake_window.set_classroom(classroom)
        assert QFontInfo(view.headline.font()).pixelSize() > QFontInfo(view.verdict.font()).pixelSize()
        assert view.headline.font().bold()
