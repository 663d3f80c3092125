"""The model dialog's fields: the target's hint follows the preset, a load greys every entry (the folder
buttons too), and each "auto" choice of how the models run says what it becomes with the other choice."""

from __future__ import annotations

import threading

from app.settings_store import DEFAULT_REQUEST
from app.widgets.model_dialog import CACHES, CUSTOM, TARGET_HINT, ModelDialog
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import RUN_MS


def dialog_of(qtbot, **request) -> ModelDialog:
    dialog = ModelDialog(current=DEFAULT_REQUEST.with_changes(**request))
    qtbot.addWidget(dialog)
    return dialog


def test_the_custom_preset_shows_the_generic_target_hint(qtbot):
    dialog = dialog_of(qtbot)
    assert dialog.target.placeholderText() == "bundled demo family"
    dialog.preset.setCurrentIndex(dialog.preset.count() - 1)
    assert dialog.preset.currentData()[0] == CUSTOM
    assert dialog.target.placeholderText() == TARGET_HINT == "hub id (org/name) or local folder"
    dialog.preset.setCurrentIndex(0)
    assert dialog.target.placeholderText() == "bundled demo family"


def test_a_load_greys_the_folder_buttons_with_the_fields(qtbot, make_window):
    window = make_window(FakeEngine())
    gate = threading.Event()

    def gated(request, progress, cancelled):
        progress(0.5, "loading demo/target")
        gate.wait(RUN_MS / 1000)
        return FakeEngine()

    window.runs.factory = gated
    dialog = window.open_model_dialog()
    assert dialog.target_browse.isEnabled() and dialog.draft_browse.isEnabled()
    assert dialog.target_browse.text() == dialog.draft_browse.text() == "Folder…"
    dialog.load_button.click()
    qtbot.waitUntil(lambda: dialog.progress.value() == 500, timeout=RUN_MS)
    assert not dialog.target.isEnabled() and not dialog.draft.isEnabled()
    assert not dialog.target_browse.isEnabled() and not dialog.draft_browse.isEnabled()
    loader = window.runs.loader
    dialog.cancel_button.click()
    assert dialog.target_browse.isEnabled() and dialog.draft_browse.isEnabled()
    with qtbot.waitSignal(loader.finished, timeout=RUN_MS):
        gate.set()


def test_the_auto_cache_follows_the_compile_choice(qtbot):
    dialog = dialog_of(qtbot)
    auto_cache = dialog.cache.itemText(0)
    assert auto_cache == CACHES[0][0]  # the device's default, compiling not asked for
    dialog.compile.setCurrentIndex(dialog.compile.findData(True))
    assert dialog.cache.itemText(0) == "auto (static: compiling needs it)"
    assert dialog.cache.currentData() is None  # the choice stays auto; only its words change
    dialog.compile.setCurrentIndex(dialog.compile.findData(False))
    assert dialog.cache.itemText(0) == auto_cache
    dialog.compile.setCurrentIndex(dialog.compile.findData(None))
    assert dialog.cache.itemText(0) == auto_cache


def test_the_auto_compile_follows_the_cache_choice(qtbot):
    dialog = dialog_of(qtbot)
    auto_compile = dialog.compile.itemText(0)
    dialog.cache.setCurrentIndex(dialog.cache.findData("dynamic"))
    assert dialog.compile.itemText(0) == "auto (off: the dynamic cache is not compiled)"
    dialog.cache.setCurrentIndex(dialog.cache.findData("static"))
    assert dialog.compile.itemText(0) == auto_compile


def test_a_remembered_compiled_choice_opens_with_the_matching_words(qtbot):
    dialog = dialog_of(qtbot, compile=True)
    assert dialog.cache.itemText(0) == "auto (static: compiling needs it)"
    assert dialog.request().cache is None and dialog.request().compile is True
