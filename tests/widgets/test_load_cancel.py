"""Cancelling a model load from the window: the model dialog's Cancel (and Escape, and closing it), the status
bar's Cancel (also for the load at start-up); the models in use stay, a queued run is dropped; and the status
bar's short load steps."""

from __future__ import annotations

import pathlib
import threading

import pytest
from PySide6.QtCore import Qt

from app.engine.engine import LocalEngine
from app.engine.load_request import LoadRequest
from app.settings_store import DEFAULT_REQUEST
from app.widgets.status import _load_step
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import RUN_MS, deliver_queued_signals, hold_compiles, run_to_end


class GatedLoad:
    """An engine factory that reports half its progress, then waits for the test; the engines it made."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.made: list[FakeEngine] = []

    def __call__(self, request, progress, cancelled):
        progress(0.5, "loading /somewhere/models/demo/target")
        self.gate.wait(RUN_MS / 1000)
        engine = FakeEngine()
        self.made.append(engine)
        return engine


def fill_dialog(dialog) -> None:
    """Entries of the user's own, which a cancel must keep."""
    dialog.preset.setCurrentIndex(dialog.preset.count() - 1)  # custom
    dialog.target.setText("my-org/my-target")
    dialog.draft.setText("my-org/my-drafter")
    dialog.device.setCurrentText("cpu")
    dialog.dtype.setCurrentText("bfloat16")
    dialog.cache.setCurrentIndex(dialog.cache.findData("static"))
    dialog.compile.setCurrentIndex(dialog.compile.findData(True))


def assert_editable_with_entries(dialog) -> None:
    assert not dialog.loading and dialog.isVisible()
    assert dialog.request() == LoadRequest(target="my-org/my-target", draft="my-org/my-drafter", device="cpu",
                                           dtype="bfloat16", cache="static", compile=True)
    for widget in (dialog.preset, dialog.target, dialog.draft, dialog.device, dialog.dtype, dialog.cache,
                   dialog.compile, dialog.load_button, dialog.close_button):
        assert widget.isEnabled() and widget.isVisible(), widget
    assert dialog.cancel_button.isHidden() and dialog.progress.isHidden()
    assert "cancelled" in dialog.message.text()


def assert_progress_ended(status) -> None:
    assert status.load_bar.isHidden() and status.load_label.isHidden() and status.cancel_load_button.isHidden()


CANCELS = {
    "Cancel button": lambda qtbot, window, dialog: qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton),
    "Escape": lambda qtbot, window, dialog: qtbot.keyClick(dialog, Qt.Key.Key_Escape),
    "closing the dialog": lambda qtbot, window, dialog: dialog.close(),
    "status bar": lambda qtbot, window, dialog: qtbot.mouseClick(window.status.cancel_load_button,
                                                                 Qt.MouseButton.LeftButton),
}


@pytest.mark.parametrize("how", CANCELS)
def test_cancelling_a_dialog_load_keeps_the_models_the_entries_and_drops_the_queued_run(qtbot, make_window, how):
    window = make_window(FakeEngine())
    engine = window.engine
    load = GatedLoad()
    window.runs.factory = load
    dialog = window.open_model_dialog()
    fill_dialog(dialog)
    qtbot.mouseClick(dialog.load_button, Qt.MouseButton.LeftButton)
    assert dialog.loading and window.is_loading
    qtbot.waitUntil(lambda: dialog.progress.value() == 500 and window.status.load_bar.value() == 500, timeout=RUN_MS)
    assert dialog.cancel_button.isVisible() and dialog.cancel_button.isEnabled()
    assert dialog.close_button.isHidden() and not dialog.load_button.isEnabled() and not dialog.target.isEnabled()
    assert window.status.cancel_load_button.isVisible()
    assert not window.start_generation()  # queued until the models are ready
    loader = window.runs.loader

    CANCELS[how](qtbot, window, dialog)

    assert not window.is_loading and loader.cancelled
    assert window.engine is engine and not engine.closed
    assert_editable_with_entries(dialog)
    assert_progress_ended(window.status)
    assert window.banner.isVisible()
    assert "Load cancelled; still using fake-target." in window.banner.text()
    assert "run you queued was not started" in window.banner.text()
    with qtbot.waitSignal(loader.finished, timeout=RUN_MS):
        load.gate.set()  # the load ends at its next step; what it made is closed, never used
    deliver_queued_signals()  # whatever the thread still queued for the GUI thread (nothing may arrive)
    assert window.engine is engine and not window.is_generating and window.session.end is None
    assert all(made.closed for made in load.made)
    assert_editable_with_entries(dialog)

    run_to_end(qtbot, window)  # the models in use still run
    assert window.session.end.reason == "max_tokens"
    dialog.close()
    assert not dialog.isVisible()  # not loading: closing closes


def test_after_a_cancel_the_dialog_loads_again(qtbot, make_window):
    window = make_window(FakeEngine())
    first = GatedLoad()
    window.runs.factory = first
    dialog = window.open_model_dialog()
    dialog.load_button.click()
    qtbot.waitUntil(lambda: dialog.progress.value() == 500, timeout=RUN_MS)
    dialog.cancel_button.click()
    second = GatedLoad()
    second.gate.set()
    window.runs.factory = second
    with qtbot.waitSignal(window.sig_models_changed, timeout=RUN_MS):
        dialog.load_button.click()  # the cancelled load's thread may still be waiting: no matter
    assert window.engine is second.made[0] and not dialog.isVisible()
    first.gate.set()
    qtbot.waitUntil(lambda: bool(first.made) and first.made[0].closed, timeout=RUN_MS)
    assert window.engine is second.made[0] and not window.engine.closed


def test_what_a_cancelled_load_sent_just_before_the_cancel_changes_nothing(qtbot, make_window):
    """A step or an engine queued by the load thread as the cancel came: no progress comes back, the engine is
    closed, the dialog stays as the cancel left it."""
    window = make_window(FakeEngine())
    engine = window.engine
    load = GatedLoad()
    window.runs.factory = load
    dialog = window.open_model_dialog()
    dialog.load_button.click()
    qtbot.waitUntil(lambda: window.status.load_bar.value() == 500, timeout=RUN_MS)
    loader = window.runs.loader
    assert window.cancel_load() and not window.cancel_load()  # a second cancel: nothing runs
    message = dialog.message.text()

    late = FakeEngine()
    loader.sig_progress.emit("loading late", 700, 1000)  # as if queued before the cancel
    loader.sig_loaded.emit(late)
    loader.sig_failed.emit("late failure")
    assert_progress_ended(window.status)
    assert window.engine is engine and late.closed
    assert dialog.isVisible() and dialog.message.text() == message and dialog.progress.isHidden()
    assert "Load cancelled; still using fake-target." in window.banner.text()
    with qtbot.waitSignal(loader.finished, timeout=RUN_MS):
        load.gate.set()


def test_the_start_up_load_can_be_cancelled_from_the_status_bar(qtbot, make_window):
    window = make_window()  # nothing loaded yet: the bundled models load as the window opens
    load = GatedLoad()
    window.runs.factory = load
    loader = window.load_models_async(DEFAULT_REQUEST)
    qtbot.waitUntil(lambda: window.status.cancel_load_button.isVisible(), timeout=RUN_MS)
    assert window.status.load_label.text() == "Loading demo/target"
    assert window.status.cancel_load_button.text() == "Cancel" and window.status.cancel_load_button.toolTip()
    window.controls.prompt.setPlainText("def add(a, b):")
    assert not window.start_generation()  # queued

    qtbot.mouseClick(window.status.cancel_load_button, Qt.MouseButton.LeftButton)

    assert not window.is_loading and window.engine is None
    assert_progress_ended(window.status)
    text = window.banner.text()
    assert "Load cancelled: no models are loaded" in text and "File → Load models…" in text
    assert "run you queued was not started" in text
    with qtbot.waitSignal(loader.finished, timeout=RUN_MS):
        load.gate.set()
    deliver_queued_signals()
    assert window.engine is None and not window.is_generating and load.made[0].closed
    assert not window.start_generation()  # nothing to run on: says so
    assert "No models are loaded yet" in window.banner.text()


def test_a_dialog_cancel_between_compile_steps_keeps_the_models(qtbot, make_window, tiny_llama, monkeypatch):
    """A real compiling load in this process, cancelled from the dialog while its first compile step runs: it
    ends at the next step, having compiled nothing more, and the window keeps its models."""
    gate, compiled_calls = hold_compiles(monkeypatch)
    window = make_window(FakeEngine())
    engine = window.engine
    window.runs.factory = LocalEngine.load
    target, draft = tiny_llama
    dialog = window.open_model_dialog()
    dialog.set_request(DEFAULT_REQUEST.with_changes(target=str(target), draft=str(draft), device="cpu", cache="static",
                            compile=True))
    dialog.load_button.click()
    loader = window.runs.loader
    qtbot.waitUntil(lambda: dialog.message.text() == "compiling target: one-token step (1/16)", timeout=RUN_MS)
    assert window.status.load_label.text() == "Compiling target: one-token step (1/16)"
    qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    assert window.engine is engine and not window.is_loading and not dialog.loading
    assert_progress_ended(window.status)
    with qtbot.waitSignal(loader.finished, timeout=RUN_MS):
        gate.set()
    deliver_queued_signals()
    assert compiled_calls == [1] and window.engine is engine
    assert dialog.request().target == str(target) and dialog.request().compile is True
    dialog.close()


@pytest.mark.parametrize("message, shown", [
    ("compiling target: verify 8 rows (3/16)", "Compiling target: verify 8 rows (3/16)"),
    ("compiling drafter: tree round 4 rows (12/16)", "Compiling drafter: tree round 4 rows (12/16)"),
    ("compiling target: verify 8 rows (3/16), about 2 min left",
     "Compiling target: verify 8 rows (3/16), about 2 min left"),
    ("loading /long/path/demo/target", "Loading demo/target"),
    ("loading Qwen/Qwen2.5-0.5B-Instruct", "Loading Qwen/Qwen2.5-0.5B-Instruct"),
])
def test_a_load_step_count_is_never_read_as_a_folder(tmp_path, monkeypatch, message, shown):
    """'(3/16)' looks like a relative path: a folder '(3' holding '16)' (here a link to another folder) must
    not change how the step reads, and a step count never reaches the disk at all."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "16)").touch()
    (tmp_path / "(3").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "(12").mkdir()
    (tmp_path / "(12" / "16)").touch()
    monkeypatch.chdir(tmp_path)
    assert _load_step(message) == shown
    if message.startswith("compiling"):
        def no_disk(*_args, **_kwargs):
            raise AssertionError("a step count looked at the disk")
        monkeypatch.setattr(pathlib.Path, "exists", no_disk)
        monkeypatch.setattr(pathlib.Path, "resolve", no_disk)
        assert _load_step(message) == shown


def test_the_dialog_opened_during_the_start_up_load_shows_it_and_can_cancel_it(qtbot, make_window):
    window = make_window()
    load = GatedLoad()
    window.runs.factory = load
    loader = window.load_models_async(DEFAULT_REQUEST.with_changes(device="cpu"))
    qtbot.waitUntil(lambda: window.status.load_bar.value() == 500, timeout=RUN_MS)
    first = window.open_model_dialog()
    assert first.loading and first.cancel_button.isVisible() and not first.load_button.isEnabled()
    assert first.request().device == "cpu"  # the request loading, not the one in use
    gone = []
    first.destroyed.connect(lambda: gone.append(True))
    second = window.open_model_dialog()  # replaces the first (deleted later), watching the same load
    qtbot.waitUntil(lambda: bool(gone), timeout=RUN_MS)
    assert second.loading
    qtbot.mouseClick(second.cancel_button, Qt.MouseButton.LeftButton)
    assert not window.is_loading and not second.loading and second.load_button.isEnabled()
    assert "no models are loaded" in window.banner.text()
    with qtbot.waitSignal(loader.finished, timeout=RUN_MS):
        load.gate.set()
    second.close()


def test_a_cancelled_engine_process_load_ends_its_process_at_once(qtbot, store, tiny_llama):
    """As the app runs: the load in an engine process, cancelled from the status bar as soon as it shows."""
    import multiprocessing
    import time

    from app.launch import HistoryOutOfCollector
    from app.main_window import MainWindow

    window = MainWindow(settings=store)  # the app's default: an engine process
    HistoryOutOfCollector(window.session)
    qtbot.addWidget(window)
    window.show()
    try:
        before = set(multiprocessing.active_children())
        target, draft = tiny_llama
        loader = window.load_models_async(LoadRequest(target=str(target), draft=str(draft), device="cpu",
                                                      dtype="float32"))
        qtbot.waitUntil(lambda: window.status.cancel_load_button.isVisible(), timeout=RUN_MS)
        qtbot.waitUntil(lambda: bool(set(multiprocessing.active_children()) - before), timeout=RUN_MS)  # it runs
        started = time.monotonic()
        with qtbot.waitSignal(loader.finished, timeout=RUN_MS):
            qtbot.mouseClick(window.status.cancel_load_button, Qt.MouseButton.LeftButton)
            assert not window.is_loading and window.engine is None
        assert time.monotonic() - started < 5.0
        qtbot.waitUntil(lambda: not set(multiprocessing.active_children()) - before, timeout=RUN_MS)
        deliver_queued_signals()
        assert window.engine is None and "Load cancelled" in window.banner.text()
    finally:
        window.shutdown()
