"""The window under trouble: odd text, invalid numbers, out of memory, Stop in a slow pass, closing while
loading, a corrupted settings store. The prompt and the text so far are always kept; the app stays usable."""

from __future__ import annotations

import json
import time

import pytest
import torch
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QDoubleSpinBox, QSpinBox

from app.engine.drafters.model_drafter import ModelDrafter
from app.engine.settings import DecodeSettings
from tests.engine.helpers import fail_on_call
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import RUN_MS, run_to_end, wait_for_passes

ODD_PROMPT = "emoji 🙂👩‍👩‍👧 مرحبا שלום e\u0301 a\u0308 ctl\x07\x1b[0m\ttab\u202e"


def strict_json_lines(path) -> list[dict]:
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")
    return [json.loads(line, parse_constant=refuse) for line in path.read_text(encoding="utf-8").splitlines()]


def test_odd_characters_in_the_prompt_go_through_the_window(qtbot, real_window):
    window = real_window
    window.controls.prompt.setPlainText(ODD_PROMPT)
    window.controls.max_tokens.setValue(12)
    run_to_end(qtbot, window)
    assert window.session.end.reason == "max_tokens", window.session.end.error
    assert window.controls.prompt_text == ODD_PROMPT
    shown = window.token_view.toPlainText()
    assert shown.startswith(ODD_PROMPT) and window.token_view.token_count > 0
    assert window.copy_generated_text() == window.session.generated_text == QApplication.clipboard().text()


def number_fields(window) -> list:
    fields = window.controls.findChildren(QSpinBox) + window.drafters.findChildren(QSpinBox)
    return fields + window.drafters.findChildren(QDoubleSpinBox)


@pytest.mark.parametrize("typed", ["abc", "-5", "1e99", "999999999999", "", "nan", "0,5.5"])
def test_invalid_numbers_in_every_field_never_make_invalid_settings(qtbot, fake_window, typed):
    window = fake_window
    fields = number_fields(window)
    assert len(fields) >= 10  # max tokens, seed, exit layer, K, top-k, M, temperature, top-p, B, g
    for spin in fields:
        before = spin.value()
        spin.lineEdit().selectAll()
        qtbot.keyClicks(spin.lineEdit(), typed)
        qtbot.keyClick(spin.lineEdit(), Qt.Key.Key_Return)
        spin.clearFocus()
        assert spin.minimum() <= spin.value() <= spin.maximum(), spin.toolTip()
        assert spin.value() == before or typed in ("-5", "1e99", "999999999999", "0,5.5"), spin.toolTip()
    window.drafters.flush()
    assert isinstance(window.push_settings(), DecodeSettings)
    assert window.drafters.error.isHidden(), window.drafters.error.text()


def test_unknown_device_and_dtype_in_the_model_dialog(qtbot, real_window):
    window = real_window
    engine = window.engine
    for device, dtype, expected in (("gpu", "auto", "unknown device"), ("cpu", "float8", "unknown dtype")):
        dialog = window.open_model_dialog()
        dialog.preset.setCurrentIndex(dialog.preset.count() - 1)
        dialog.target.setText(engine.summary.target_name)
        dialog.device.setCurrentText(device)
        dialog.dtype.setCurrentText(dtype)
        dialog.load_button.click()
        qtbot.waitUntil(lambda: not window.is_loading, timeout=RUN_MS)
        assert expected in dialog.message.text(), dialog.message.text()
        assert window.engine is engine
        dialog.close()


def test_out_of_memory_during_a_pass_is_shown_and_the_next_run_works(qtbot, real_window, tiny_engine, monkeypatch,
                                                                      tmp_path):
    window = real_window
    target = tiny_engine.decoder.target
    monkeypatch.setattr(target, "extend", fail_on_call(6, torch.OutOfMemoryError("CUDA out of memory"))(target.extend))
    window.controls.max_tokens.setValue(60)
    run_to_end(qtbot, window)
    session = window.session
    assert session.end.reason == "error" and "OutOfMemoryError" in window.banner.text()
    assert "memory was released" in window.banner.text()
    assert window.token_view.token_count > 0 and session.generated_text
    assert window.controls.prompt_text == "def add(a, b):"
    window.export_run("jsonl", str(tmp_path / "failed.jsonl"))
    lines = strict_json_lines(tmp_path / "failed.jsonl")
    assert sum(line["type"] == "pass" for line in lines) == len(session.passes) >= 1
    assert lines[-1]["type"] == "end" and lines[-1]["reason"] == "error"

    monkeypatch.undo()
    run_to_end(qtbot, window)
    assert window.session.end.reason == "max_tokens"


def test_out_of_memory_while_loading_keeps_the_previous_models(qtbot, real_window, monkeypatch):
    import app.engine.loading.hub as hub

    window = real_window
    engine = window.engine

    def exhausted(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20 GiB")

    monkeypatch.setattr(hub.AutoModelForCausalLM, "from_pretrained", exhausted)
    dialog = window.open_model_dialog()
    dialog.preset.setCurrentIndex(dialog.preset.count() - 1)
    dialog.target.setText(engine.summary.target_name)
    dialog.load_button.click()
    qtbot.waitUntil(lambda: not window.is_loading, timeout=RUN_MS)
    assert "out of memory" in dialog.message.text() and "memory was released" in dialog.message.text()
    assert window.engine is engine and "Still using" in window.banner.text()
    dialog.close()
    monkeypatch.undo()
    window.controls.max_tokens.setValue(6)
    run_to_end(qtbot, window)
    assert window.session.end.reason == "max_tokens"


def test_stop_during_a_slow_pass_keeps_the_text_and_exports_every_pass(qtbot, real_window, monkeypatch, tmp_path):
    window = real_window
    original = ModelDrafter.propose

    def slow(self, *args, **kwargs):
        time.sleep(0.3)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ModelDrafter, "propose", slow)
    window.drafters.set_drafters(("draft-model",))
    window.drafters.flush()
    window.controls.max_tokens.setValue(5_000)
    assert window.start_generation()
    wait_for_passes(qtbot, window, 2)
    qtbot.wait(150)  # inside the next pass
    asked = time.monotonic()
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        qtbot.keyClick(window.controls.prompt, Qt.Key.Key_Escape)
    assert time.monotonic() - asked < 2.0
    session = window.session
    assert session.end.reason == "stopped" and window.token_view.token_count > 0
    window.export_run("jsonl", str(tmp_path / "stopped.jsonl"))
    lines = strict_json_lines(tmp_path / "stopped.jsonl")
    assert [line["index"] for line in lines if line["type"] == "pass"] == list(range(session.end.passes))
    assert lines[-1]["reason"] == "stopped"
    assert window.copy_generated_text() == session.end.text != ""


def test_text_of_a_failed_run_stays_in_the_view_and_can_be_copied(qtbot, make_window):
    window = make_window(FakeEngine(fail_after=5))
    window.controls.prompt.setPlainText("keep me")
    run_to_end(qtbot, window)
    assert window.session.end.reason == "error"
    expected = window.session.streamed_text
    assert expected and window.copy_generated_text() == expected
    window.token_view.selectAll()
    window.token_view.copy()
    assert expected.split()[0] in QApplication.clipboard().text()


def test_closing_while_models_load_returns_promptly_and_discards_the_result(qtbot, make_window, monkeypatch):
    import app.engine.loading as loading

    steps = []

    def slow_load(target=None, draft=None, device="auto", dtype="auto", progress=None, **_):
        for step in range(50):  # 10 s in all, reporting progress between steps like the real loader
            progress(step / 50, f"step {step}")
            steps.append(step)
            time.sleep(0.2)
        raise AssertionError("the load should have been abandoned")

    monkeypatch.setattr(loading, "load_models", slow_load)
    window = make_window(FakeEngine())
    engine = window.engine
    window.load_models_async(dict(target="slow", draft=None, device="cpu", dtype="auto"))
    qtbot.waitUntil(lambda: len(steps) >= 2, timeout=RUN_MS)
    started = time.monotonic()
    window.close()
    assert time.monotonic() - started < 1.0
    assert not window.is_loading and window.engine is engine
    QApplication.processEvents()
    assert window.engine is engine and len(steps) < 10


@pytest.mark.parametrize("key, value", [
    ("decode/settings", '{"k": "four"}'),
    ("decode/settings", '{"sampling": 5}'),
    ("decode/settings", '{"drafters": 5}'),
    ("decode/settings", "[]"),
    ("decode/settings", '{"k": 1000000}'),
    ("models/request", '{"target": 5}'),
    ("models/request", "null"),
    ("window/state", "not a byte array"),
    ("controls/prompt", ["a", "list"]),
])
def test_corrupted_settings_values_are_ignored_with_a_warning(qtbot, make_window, store, key, value):
    store.setValue(key, value)
    store.sync()
    window = make_window(FakeEngine())
    assert window.live.get().k == DecodeSettings().k
    assert window.model_request["target"] is None
    window.controls.prompt.setPlainText("still works")
    window.controls.max_tokens.setValue(5)
    run_to_end(qtbot, window)
    assert window.session.end.reason == "max_tokens"
