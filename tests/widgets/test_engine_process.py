"""The window as the app runs it: models loaded into an engine process, generation, stop, race,
a failed load that keeps the running engine, a new load that replaces it, an engine that dies and is
started again, and closing that ends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from app.engine.engine import ModelsSummary
from app.engine.load_request import LoadRequest
from app.engine.remote import EngineProcess
from app.widgets.inspector import COL_TARGET
from tests.widgets.helpers import RUN_MS, run_to_end, wait_for_passes

LOAD_MS = 120_000  # a fresh process imports torch and transformers before it loads anything


@pytest.fixture
def process_window(qtbot, store):
    from app.launch import HistoryOutOfCollector
    from app.main_window import MainWindow

    window = MainWindow(settings=store)  # the app's default: an engine process
    HistoryOutOfCollector(window.session)  # the collector policy of the app's entry points
    qtbot.addWidget(window)
    window.show()
    yield window
    window.shutdown()


def load(qtbot, window, request: dict) -> None:
    with qtbot.waitSignal(window.sig_models_changed, timeout=LOAD_MS):
        assert window.load_models_async(request) is not None
    qtbot.waitUntil(lambda: not window.is_loading, timeout=RUN_MS)


def test_the_window_runs_its_engine_in_a_process(qtbot, process_window, tiny_llama, tmp_path):
    window = process_window
    target, draft = tiny_llama
    request = LoadRequest(target=str(target), draft=str(draft), device="cpu", dtype="float32")
    load(qtbot, window, request)
    engine = window.engine
    assert isinstance(engine, EngineProcess) and engine.alive and isinstance(window.summary, ModelsSummary)
    assert "draft-model" in window.drafters.chain_order()
    assert window.status.models_label.text() == f"{target.parent.name}/{target.name} ← {draft.parent.name}/{draft.name}"
    assert str(target) in window.status.models_label.toolTip()

    window.controls.prompt.setPlainText("def add(a, b):")
    window.drafters.set_drafters(("draft-model",))
    window.controls.max_tokens.setValue(24)
    run_to_end(qtbot, window)
    assert window.session.end.reason in ("max_tokens", "eos") and window.token_view.token_count > 0
    window.token_view.select_pass(0)
    qtbot.waitUntil(lambda: window.inspector.table.rowCount() > 0)
    targets = [window.inspector.table.item(row, COL_TARGET).text() for row in range(window.inspector.table.rowCount())]
    assert not all(text.startswith("#") for text in targets)  # spelled by this process's copy of the tokenizer
    assert "tokens/s" in window.status.speed_label.text()

    window.controls.max_tokens.setValue(2000)
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        assert window.start_generation()
        wait_for_passes(qtbot, window, 3)
        window.stop_generation()
    assert window.session.end.reason == "stopped"

    window.controls.max_tokens.setValue(12)
    with qtbot.waitSignal(window.sig_race_finished, timeout=RUN_MS):
        assert window.start_race()
    assert window.race_view.timeline.result is not None and window.race_view.timeline.result.identical

    assert window.load_models_async(request.with_changes(target=str(tmp_path / "missing"))) is None  # said at once
    assert not window.is_loading and "does not exist" in window.banner.text()
    assert "Could not load the models" in window.banner.text() and "Still using" in window.banner.text()
    assert window.engine is engine and engine.alive
    run_to_end(qtbot, window)
    assert window.session.end.reason in ("max_tokens", "eos")

    load(qtbot, window, request)
    replacement = window.engine
    assert replacement is not engine and replacement.alive and not engine.alive

    os.kill(replacement.pid, signal.SIGKILL)  # what an out-of-memory killer does
    qtbot.waitUntil(lambda: not replacement.alive)
    with qtbot.waitSignal(window.sig_models_changed, timeout=LOAD_MS):
        assert not window.start_generation()  # Generate on a dead engine loads the models again
        assert "loading again" in window.banner.text()
    qtbot.waitUntil(lambda: not window.is_loading, timeout=RUN_MS)
    assert window.engine is not replacement and window.engine.alive
    run_to_end(qtbot, window)
    assert window.session.end.reason in ("max_tokens", "eos")
    restarted = window.engine
    window.close()
    assert not restarted.alive


def test_the_windows_process_needs_neither_torch_nor_transformers():
    """The models live in the engine process: the window starts fast and small without them."""
    check = ("import sys; import app.cli, app.main_window, app.launch, app.runs, app.worker, app.engine.remote; "
             "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; "
             "assert not heavy, heavy")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert result.returncode == 0, result.stderr
