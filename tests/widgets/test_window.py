"""The playground window end to end, on the real engine with tiny random models."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.engine.events import PassEvent
from app.widgets import token_style as ts
from tests.widgets.helpers import RUN_MS, fragment_outcomes, run_to_end, wait_for_passes


def expected_styles(passes: list[PassEvent], hide_rejected: bool = False) -> set[str]:
    styles = set()
    for event in passes:
        for token in event.drafted:
            if token.outcome in ("accepted", "asd_exception") or (token.outcome == "rejected" and not hide_rejected):
                styles.add(token.outcome)
        if event.appended is not None:
            styles.add(event.appended.kind)
    return styles


def test_generate_shows_formats_charts_and_speed(qtbot, real_window):
    window = real_window
    window.drafters.set_drafters(("draft-model",))
    window.controls.max_tokens.setValue(24)
    run_to_end(qtbot, window)

    session = window.session
    assert session.end is not None and session.end.reason in ("max_tokens", "eos")
    passes = len(session.passes)
    assert passes >= 1
    assert fragment_outcomes(window.token_view) - {ts.PROMPT} == expected_styles(session.passes)
    qtbot.waitUntil(lambda: set(window.charts.point_counts().values()) == {passes})  # plots redraw in turns
    assert "tokens/s" in window.status.speed_label.text()
    assert window.controls.generate_button.isEnabled()


def test_live_changes_apply_from_the_next_pass(qtbot, real_window):
    window = real_window
    window.drafters.set_drafters(("draft-model",))
    window.drafters.k_spin.setValue(4)
    window.controls.max_tokens.setValue(40)
    assert window.start_generation(paused=True)

    window.step()
    wait_for_passes(qtbot, window, 1)
    first = window.session.passes[0]
    assert (first.drafter, first.k, first.verify) == ("draft-model", 4, "greedy")

    # Drafter, K and the rule change while the engine waits between passes.
    window.drafters.set_drafters(("layer-skip",))
    window.drafters.k_spin.setValue(2)
    window.drafters.set_rule("asd")
    with qtbot.waitSignal(window.drafters.sig_changed, timeout=2_000):
        pass
    assert window.live.get().k == 2

    window.step()
    wait_for_passes(qtbot, window, 2)
    second = window.session.passes[1]
    assert (second.drafter, second.k, second.verify) == ("layer-skip", 2, "asd")

    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        window.controls.pause_button.setChecked(False)  # resume to the end
    later = window.session.passes[1:]
    assert all(p.verify == "asd" and p.k <= 2 for p in later)  # K shrinks only to fit max new tokens
    assert window.session.end.reason in ("max_tokens", "eos")


def test_stop_mid_generation_keeps_the_text(qtbot, real_window):
    window = real_window
    window.controls.max_tokens.setValue(5_000)
    assert window.start_generation()
    wait_for_passes(qtbot, window, 3)
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        qtbot.mouseClick(window.controls.stop_button, Qt.MouseButton.LeftButton)
    assert window.session.end.reason == "stopped"
    assert window.token_view.token_count > 0
    assert window.controls.prompt_text == "def add(a, b):"
    assert window.controls.generate_button.isEnabled()


def test_close_mid_generation_joins_the_thread(qtbot, real_window):
    window = real_window
    window.controls.max_tokens.setValue(5_000)
    assert window.start_generation()
    wait_for_passes(qtbot, window, 2)
    window.close()
    assert not window.is_generating  # stopped and joined inside closeEvent


def test_paused_run_stops_when_the_window_closes(qtbot, real_window):
    window = real_window
    assert window.start_generation(paused=True)
    window.close()
    assert not window.is_generating


def test_load_error_keeps_the_previous_models(qtbot, real_window, tmp_path):
    window = real_window
    engine = window.engine
    dialog = window.open_model_dialog()  # a child of the window: closed with it
    dialog.preset.setCurrentIndex(dialog.preset.count() - 1)  # custom
    dialog.target.setText(str(tmp_path / "no-such-model"))
    dialog.draft.setText("")
    dialog.load_button.click()
    qtbot.waitUntil(lambda: not dialog.loading and not window.is_loading, timeout=RUN_MS)
    assert dialog.isVisible(), dialog.message.text()
    assert "no-such-model" in dialog.message.text(), dialog.message.text()
    assert window.engine is engine
    assert window.banner.isVisible() and "Still using" in window.banner.text()

    window.controls.max_tokens.setValue(4)
    run_to_end(qtbot, window)  # still usable
    assert window.session.end.reason in ("max_tokens", "eos")
    dialog.close()


def test_screenshot_renders_a_real_generation(qtbot, tiny_llama, tmp_path):
    from PySide6.QtGui import QImage

    from app.launch import render_screenshot

    target, draft = tiny_llama
    path = tmp_path / "shot.png"
    render_screenshot(str(path), prompt="def add(a, b):", target=str(target), draft=str(draft), max_new_tokens=8)
    image = QImage(str(path))
    assert not image.isNull() and image.width() > 800
    QApplication.processEvents()
