"""The first minutes in the window: load progress, Generate while the models load, no stale message, a first
prompt and what the bundled models can do, options the models cannot use switched off with a reason, a
model dialog whose fields switch to Custom when typed in, whole rows in the drafter list, and a quick exit."""

from __future__ import annotations

import threading
import time

import pytest
from PySide6.QtWidgets import QApplication, QTabBar

from app.engine.engine import LocalEngine
from app.engine.load_request import LoadRequest
from app.engine.settings import GenerationControl, LiveSettings, SettingsError
from app.main_window import BUNDLED_HINT, FIRST_PROMPT
from app.settings_store import DEFAULT_REQUEST
from app.widgets.model_dialog import CUSTOM, ModelDialog
from app.worker import GenerationThread
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import RUN_MS

LOAD_MS = 120_000  # a fresh engine process imports torch and transformers before it loads anything
EXIT_BOUND_S = 5.0  # generous: the window closes its engine process in well under a second


@pytest.fixture(scope="module")
def demo_engine():
    return LocalEngine.load(DEFAULT_REQUEST.with_changes(device="cpu"))  # the bundled family (HF_HUB_OFFLINE=1)


def gated_factory(gate: threading.Event):
    """A loader that reports half its progress, then waits for the test to let it finish."""
    def factory(request, progress, cancelled):
        progress(0.5, "loading /somewhere/models/demo/target")
        gate.wait(RUN_MS / 1000)
        return FakeEngine()
    return factory


def test_generate_while_loading_queues_the_run_and_shows_progress(qtbot, make_window):
    window = make_window()
    gate = threading.Event()
    window.runs.factory = gated_factory(gate)
    window.controls.prompt.setPlainText("def add(a, b):")
    window.load_models_async(DEFAULT_REQUEST)
    qtbot.waitUntil(lambda: window.status.load_bar.isVisible() and window.status.load_bar.value() == 500)
    assert window.status.load_label.text() == "Loading demo/target"

    assert not window.start_generation()  # not now: queued until the models are ready
    assert "No models are loaded" not in window.banner.text()
    assert "your run starts as soon as they are ready" in window.banner.text()
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        gate.set()
    assert window.session.end is not None and window.session.end.reason != "error"
    assert not window.banner.isVisible() and not window.status.load_bar.isVisible()


def test_a_race_while_loading_says_the_models_are_loading(qtbot, make_window):
    window = make_window()
    gate = threading.Event()
    window.runs.factory = gated_factory(gate)
    window.load_models_async(DEFAULT_REQUEST)
    assert not window.start_race()
    assert "still loading" in window.banner.text() and "No models are loaded" not in window.banner.text()
    with qtbot.waitSignal(window.sig_models_changed, timeout=RUN_MS):
        gate.set()
    qtbot.waitUntil(lambda: not window.is_loading)


def test_a_stale_message_is_cleared_when_the_models_are_ready(qtbot, make_window):
    window = make_window()
    window.controls.prompt.setPlainText("def add(a, b):")
    assert not window.start_generation()  # nothing loaded, nothing loading: this message is right here
    assert "No models are loaded yet" in window.banner.text() and window.banner.isVisible()
    gate = threading.Event()
    gate.set()
    window.runs.factory = gated_factory(gate)
    with qtbot.waitSignal(window.sig_models_changed, timeout=RUN_MS):
        window.load_models_async(DEFAULT_REQUEST)
    assert not window.banner.isVisible()
    qtbot.waitUntil(lambda: not window.is_loading)


def test_the_bundled_models_prefill_a_first_prompt_and_say_what_they_can_do(make_window):
    window = make_window(FakeEngine())  # loaded from the default request: the bundled family
    assert window.controls.prompt_text == FIRST_PROMPT and FIRST_PROMPT.startswith("for i in range")
    assert window.controls.model_hint.isVisible() and window.controls.model_hint.text() == BUNDLED_HINT
    assert "Python" in BUNDLED_HINT and "no stories" in BUNDLED_HINT
    assert "Python" in window.controls.prompt.placeholderText()


def test_a_typed_prompt_is_kept_and_other_models_get_no_bundled_hint(make_window):
    window = make_window()
    window.controls.prompt.setPlainText("keep me")
    window.set_engine(FakeEngine())
    assert window.controls.prompt_text == "keep me"
    other = make_window()
    other.set_engine(FakeEngine(), DEFAULT_REQUEST.with_changes(target="org/model"))
    assert other.controls.prompt_text == "" and not other.controls.model_hint.isVisible()


def test_the_chat_template_option_is_off_with_a_reason_for_the_demo_family(make_window, demo_engine):
    assert demo_engine.summary.has_chat_template is False
    window = make_window()
    window.controls.chat_template.setChecked(True)  # as a saved setting from chat models would
    window.set_engine(demo_engine)
    box = window.controls.chat_template
    assert not box.isEnabled() and not box.isChecked()
    assert "no chat template" in box.toolTip()


def test_a_refused_run_reaches_the_window_without_a_traceback(qtbot, caplog):
    def refuse(*_args, **_kwargs):
        raise SettingsError("this model's tokenizer has no chat template: switch the chat template option off")

    thread = GenerationThread(refuse, "x", LiveSettings(), GenerationControl())
    with qtbot.waitSignal(thread.sig_event) as ended, qtbot.waitSignal(thread.sig_finished):
        thread.start()
    thread.wait()
    assert ended.args[0].reason == "error" and "no chat template" in ended.args[0].error
    assert not any(record.exc_info for record in caplog.records)


def test_typing_a_target_switches_the_preset_to_custom(qtbot, store):
    dialog = ModelDialog(current=DEFAULT_REQUEST)
    qtbot.addWidget(dialog)
    assert dialog.preset.currentData()[0] is None  # the bundled family
    qtbot.keyClicks(dialog.target, "Qwen/Qwen2.5-0.5B-Instruct")
    assert dialog.preset.currentData()[0] == CUSTOM
    assert dialog.request().target == "Qwen/Qwen2.5-0.5B-Instruct"


def test_the_drafter_list_shows_every_row_whole(make_window):
    window = make_window(FakeEngine())
    chain = window.drafters.chain
    rows = sum(chain.sizeHintForRow(i) for i in range(chain.count()))
    assert chain.count() >= 5 and chain.viewport().height() >= rows
    assert chain.verticalScrollBar().maximum() == 0


@pytest.mark.parametrize("size", [(1024, 700), (1366, 768)])
def test_first_start_shows_the_drafters_and_the_charts_with_the_guide_one_tab_away(qtbot, make_window, store, size):
    store.setValue("guide/seen", False)
    window = make_window(FakeEngine())
    window.resize(*size)
    QApplication.processEvents()
    assert window.drafters_dock.isVisible() and window.drafters.chain.isVisible()
    assert window.charts_dock.isVisible() and window.charts.isVisible()
    bar = next(bar for bar in window.findChildren(QTabBar) if bar.isVisible()
               and window.guide_dock.windowTitle() in {bar.tabText(i) for i in range(bar.count())})
    assert bar.tabText(bar.currentIndex()) == window.drafters_dock.windowTitle()


@pytest.mark.slow
def test_closing_the_window_ends_the_engine_process_quickly(qtbot, store, tiny_llama):
    from app.launch import HistoryOutOfCollector
    from app.main_window import MainWindow

    window = MainWindow(settings=store)  # the app's default: an engine process
    HistoryOutOfCollector(window.session)
    qtbot.addWidget(window)
    window.show()
    target, draft = tiny_llama
    with qtbot.waitSignal(window.sig_models_changed, timeout=LOAD_MS):
        window.load_models_async(LoadRequest(target=str(target), draft=str(draft), device="cpu", dtype="float32"))
    qtbot.waitUntil(lambda: not window.is_loading)
    engine = window.engine
    started = time.perf_counter()
    window.close()  # File → Quit
    closed_s = time.perf_counter() - started
    assert not engine.alive
    assert closed_s < EXIT_BOUND_S, closed_s
    print(f"window closed and its engine process ended in {closed_s:.2f} s")
