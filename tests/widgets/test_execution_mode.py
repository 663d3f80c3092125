"""The model dialog's cache and compile choices, the status bar's mode, and the remembered choice."""

from __future__ import annotations

import json

from app.engine.events import ExecutionMode, StartEvent
from app.settings_store import DEFAULT_REQUEST
from app.widgets.model_dialog import ModelDialog
from tests.widgets.fakes import FakeEngine


def test_the_dialog_offers_the_cache_and_compile_choices(qtbot):
    dialog = ModelDialog(current=dict(DEFAULT_REQUEST))
    qtbot.addWidget(dialog)
    assert dialog.request()["cache"] is None and dialog.request()["compile"] is None  # the device's default
    assert [dialog.cache.itemData(i) for i in range(dialog.cache.count())] == [None, "dynamic", "static"]
    assert [dialog.compile.itemData(i) for i in range(dialog.compile.count())] == [None, True, False]
    dialog.set_request(dict(DEFAULT_REQUEST, cache="static", compile=True))
    assert dialog.request()["cache"] == "static" and dialog.request()["compile"] is True
    dialog.set_request(dict(DEFAULT_REQUEST, cache="dynamic", compile=False))
    assert dialog.request()["cache"] == "dynamic" and dialog.request()["compile"] is False
    assert "write position" in dialog.cache.toolTip() and "falls back" in dialog.compile.toolTip()


def test_the_dialog_refuses_to_compile_on_the_dynamic_cache(qtbot):
    dialog = ModelDialog(current=dict(DEFAULT_REQUEST, cache="dynamic", compile=True))
    qtbot.addWidget(dialog)
    asked = []
    dialog.sig_load_requested.connect(asked.append)
    dialog.load_button.click()
    assert not asked and "needs the static cache" in dialog.message.text()
    dialog.cache.setCurrentIndex(dialog.cache.findData("static"))
    dialog.load_button.click()
    assert asked and asked[0]["cache"] == "static" and asked[0]["compile"] is True


def test_the_status_bar_shows_the_loaded_mode_then_the_one_in_use(make_window):
    window = make_window(FakeEngine())
    assert window.status.device_label.text() == "cpu · float32 · dynamic cache"
    assert "write position" in window.status.device_label.toolTip()
    start = StartEvent("t", None, "cuda", "bfloat16", {}, (1,), "x", execution=ExecutionMode("static", True))
    window.session.sig_started.emit(start)
    assert window.status.device_label.text() == "cpu · float32 · static cache, compiled"


def test_the_chosen_mode_is_remembered_and_a_bad_one_ignored(make_window, store):
    store.setValue("models/request", json.dumps(dict(DEFAULT_REQUEST, cache="static", compile=True)))
    store.sync()
    window = make_window()
    assert window.model_request["cache"] == "static" and window.model_request["compile"] is True
    store.setValue("models/request", json.dumps(dict(DEFAULT_REQUEST, compile="yes")))
    store.sync()
    other = make_window()
    assert other.model_request == DEFAULT_REQUEST
