"""The model dialog's cache and compile choices, the status bar's mode, the remembered choice, and a compiling
load's warm-up steps in the status bar."""

from __future__ import annotations

import json

from app.engine.engine import LocalEngine
from app.engine.events import ExecutionMode, StartEvent
from app.settings_store import DEFAULT_REQUEST
from app.widgets.model_dialog import ModelDialog
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import RUN_MS, hold_compiles


def test_the_dialog_offers_the_cache_and_compile_choices(qtbot):
    dialog = ModelDialog(current=DEFAULT_REQUEST)
    qtbot.addWidget(dialog)
    assert dialog.request().cache is None and dialog.request().compile is None  # the device's default
    assert [dialog.cache.itemData(i) for i in range(dialog.cache.count())] == [None, "dynamic", "static"]
    assert [dialog.compile.itemData(i) for i in range(dialog.compile.count())] == [None, True, False]
    dialog.set_request(DEFAULT_REQUEST.with_changes(cache="static", compile=True))
    assert dialog.request().cache == "static" and dialog.request().compile is True
    dialog.set_request(DEFAULT_REQUEST.with_changes(cache="dynamic", compile=False))
    assert dialog.request().cache == "dynamic" and dialog.request().compile is False
    assert "write position" in dialog.cache.toolTip() and "falls back" in dialog.compile.toolTip()


def test_the_dialog_refuses_to_compile_on_the_dynamic_cache(qtbot):
    dialog = ModelDialog(current=DEFAULT_REQUEST.with_changes(cache="dynamic", compile=True))
    qtbot.addWidget(dialog)
    asked = []
    dialog.sig_load_requested.connect(asked.append)
    dialog.load_button.click()
    assert not asked and "needs the static cache" in dialog.message.text()
    dialog.cache.setCurrentIndex(dialog.cache.findData("static"))
    dialog.load_button.click()
    assert asked and asked[0].cache == "static" and asked[0].compile is True


def test_the_status_bar_shows_the_loaded_mode_then_the_one_in_use(make_window):
    window = make_window(FakeEngine())
    assert window.status.device_label.text() == "cpu · float32 · dynamic cache"
    assert "write position" in window.status.device_label.toolTip()
    start = StartEvent("t", None, "cuda", "bfloat16", {}, (1,), "x", execution=ExecutionMode("static", True))
    window.session.sig_started.emit(start)
    assert window.status.device_label.text() == "cpu · float32 · static cache, compiled"


def test_the_chosen_mode_is_remembered_and_a_bad_one_ignored(make_window, store):
    store.setValue("models/request", json.dumps(DEFAULT_REQUEST.with_changes(cache="static", compile=True).to_dict()))
    store.sync()
    window = make_window()
    assert window.model_request.cache == "static" and window.model_request.compile is True
    store.setValue("models/request", json.dumps(DEFAULT_REQUEST.with_changes(compile="yes").to_dict()))
    store.sync()
    other = make_window()
    assert other.model_request == DEFAULT_REQUEST


def test_the_warm_up_steps_show_in_the_status_bar_and_a_cancel_stops_between_them(qtbot, make_window, tiny_llama,
                                                                                  monkeypatch):
    """A load in this process with compile on: the first compile step is held until the test has seen it in the
    status bar and cancelled the load; the load then ends at the next step, having compiled nothing more."""
    gate, compiled_calls = hold_compiles(monkeypatch)
    window = make_window()
    window.runs.factory = LocalEngine.load
    target, draft = tiny_llama
    loader = window.load_models_async(DEFAULT_REQUEST.with_changes(target=str(target), draft=str(draft), device="cpu",
                                           compile=True))
    assert loader is not None
    loaded, failed = [], []
    loader.sig_loaded.connect(loaded.append)
    loader.sig_failed.connect(failed.append)
    qtbot.waitUntil(lambda: window.status.load_label.text() == "Compiling target: one-token step (1/16)",
                    timeout=RUN_MS)
    assert window.status.load_bar.isVisible() and window.status.load_bar.value() == 200  # loading took 20 %
    with qtbot.waitSignal(loader.finished, timeout=RUN_MS):
        loader.cancel()
        gate.set()
    assert compiled_calls == [1] and not loaded and not failed
