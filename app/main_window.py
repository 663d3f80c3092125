"""The playground window: assembles the widgets, owns the worker threads, persists settings.

Data flows one way: widgets -> LiveSettings / GenerationControl -> engine (in a
GenerationThread) -> events -> Session -> widgets on the session's refresh
tick. The window is the only owner of threads, so closing it is the one
place that stops and joins them.

Models the window loads itself live in an engine process (app/engine/remote.py),
so drawing never takes Python turns away from decoding; `engine_process=False`
loads them in this process instead (tests patch the loader that way).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from PySide6.QtCore import QByteArray, QEventLoop, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication, QDockWidget, QFileDialog, QLabel, QMainWindow, QToolBar, QVBoxLayout, QWidget,
)

from app.engine.race import Race
from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings, SettingsError, settings_from_dict
from app.session import Session
from app.widgets.charts import RunCharts
from app.widgets.controls import ControlsPanel
from app.widgets.drafter_panel import DrafterPanel
from app.widgets.guide import READY_PROMPTS, GuidePanel, ReadyPrompt
from app.widgets.inspector import PassInspector
from app.widgets.legend import TokenLegend
from app.widgets.model_dialog import ModelDialog
from app.widgets.race import RaceView
from app.widgets.status import RunStatusBar
from app.widgets.theory import TheoryExplorer
from app.widgets.token_view import TokenView
from app.worker import GenerationThread, ModelLoadThread

log = logging.getLogger(__name__)
ORGANIZATION = "SpeculativeDecodingPlayground"
APPLICATION = "Playground"
DEFAULT_REQUEST = dict(target=None, draft=None, device="auto", dtype="auto")
EXPORTS = {
    "jsonl": ("Export events (JSON lines)", "JSON lines (*.jsonl)"),
    "csv": ("Export per-pass statistics (CSV)", "CSV (*.csv)"),
    "text": ("Export text", "Text (*.txt)"),
    "png": ("Export charts (PNG)", "PNG image (*.png)"),
}


class MainWindow(QMainWindow):
    sig_models_changed = Signal(object)  # LoadedModels or ModelsSummary
    sig_run_finished = Signal()  # the generation thread has ended and was joined
    sig_pass_selected = Signal(int)  # a token was clicked: index of its pass (for the inspector)
    sig_race_finished = Signal()  # the race thread has ended and was joined

    def __init__(self, settings: QSettings | None = None, parent=None, engine_process: bool = True) -> None:
        super().__init__(parent)
        self.engine_process = engine_process
        self.setWindowTitle("Speculative Decoding Playground")
        self.store = settings if settings is not None else QSettings(ORGANIZATION, APPLICATION)
        self.models = None
        self.decoder = None
        self.model_request = dict(DEFAULT_REQUEST)
        self.live = LiveSettings()
        self.session = Session(self)
        self._generation: GenerationThread | None = None
        self._race: GenerationThread | None = None  # runs an engine Race: both lanes in one thread
        self._inspect_from: int | None = None  # a Step was asked: inspect the first pass at or after this row
        self._loader: ModelLoadThread | None = None
        self._wanted_settings: DecodeSettings | None = None
        self._dialog: ModelDialog | None = None
        self._closing = False  # once set, results of loads still in flight are discarded
        self._build_widgets()
        self._build_docks()
        self._build_toolbar()
        self._build_menus()
        self._connect()
        self._default_layout()
        self._restore()

    # --- construction --------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.controls = ControlsPanel()
        self.token_view = TokenView()
        self.token_view.set_session(self.session)
        self.legend = TokenLegend()
        self.drafters = DrafterPanel()
        self.charts = RunCharts()
        self.charts.set_session(self.session)
        self.banner = QLabel()
        self.banner.setObjectName("runMessage")
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.banner.hide()
        self.status = RunStatusBar()
        self.setStatusBar(self.status)
        self.inspector = PassInspector()
        self.inspector.set_session(self.session)
        self.theory = TheoryExplorer()
        self.theory.set_session(self.session)
        self.race_view = RaceView()
        self.guide = GuidePanel()
        central = QWidget()
        column = QVBoxLayout(central)
        column.addWidget(self.legend)
        column.addWidget(self.banner)
        column.addWidget(self.token_view, 1)
        self.setCentralWidget(central)

    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)  # saveState/restoreState key
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_docks(self) -> None:
        self.controls_dock = self._dock("Prompt", "promptDock", self.controls, Qt.DockWidgetArea.LeftDockWidgetArea)
        self.drafters_dock = self._dock("Drafters and verification", "draftersDock", self.drafters,
                                        Qt.DockWidgetArea.RightDockWidgetArea)
        self.charts_dock = self._dock("Charts", "chartsDock", self.charts, Qt.DockWidgetArea.BottomDockWidgetArea)
        bottom, right = Qt.DockWidgetArea.BottomDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
        self.inspector_dock = self._dock("Pass inspector", "inspectorDock", self.inspector, bottom)
        self.theory_dock = self._dock("Theory explorer", "theoryDock", self.theory, bottom)
        self.race_dock = self._dock("Race", "raceDock", self.race_view, bottom)
        self.guide_dock = self._dock("Guide", "guideDock", self.guide, right)
        for dock in (self.inspector_dock, self.theory_dock, self.race_dock):
            self.tabifyDockWidget(self.charts_dock, dock)
        self.tabifyDockWidget(self.drafters_dock, self.guide_dock)
        self.charts_dock.raise_()
        self.drafters_dock.raise_()

    def _build_toolbar(self) -> None:
        """Teaching controls: step mode, Step (one pass), Run (continue), Race, Guide."""
        bar = QToolBar("Teaching", self)
        bar.setObjectName("teachingToolbar")
        self.step_mode_action = QAction("Step mode", self, checkable=True)
        self.step_mode_action.setToolTip("Generate pauses before every pass; Step runs one pass, Run continues")
        self.step_action = QAction("Step", self, shortcut=QKeySequence("F10"))
        self.step_action.setToolTip("Run exactly one pass and inspect it (F10)")
        self.step_action.triggered.connect(self.step)
        self.run_action = QAction("Run", self, shortcut=QKeySequence("F5"))
        self.run_action.setToolTip("Continue a paused run, or start one (F5)")
        self.run_action.triggered.connect(self.run_on)
        self.race_action = QAction("Race", self)
        self.race_action.setToolTip("Race plain decoding against the current speculative set-up")
        self.race_action.triggered.connect(self.start_race)
        self.guide_action = QAction("Guide", self, shortcut=QKeySequence("F1"))
        self.guide_action.triggered.connect(self.show_guide)
        for action in (self.step_mode_action, self.step_action, self.run_action, self.race_action, self.guide_action):
            bar.addAction(action)
        self.addToolBar(bar)

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.load_action = file_menu.addAction("Load &models…", self.open_model_dialog)
        self.load_action.setShortcut(QKeySequence("Ctrl+L"))
        file_menu.addSeparator()
        for kind, (title, _) in EXPORTS.items():
            file_menu.addAction(title + "…", lambda kind=kind: self._export_with_dialog(kind))
        file_menu.addSeparator()
        file_menu.addAction("&Quit", QKeySequence.StandardKey.Quit, self.close)
        edit_menu = self.menuBar().addMenu("&Edit")
        self.copy_text_action = edit_menu.addAction("Copy generated &text", self.copy_generated_text)
        self.copy_text_action.setShortcut(QKeySequence("Ctrl+Shift+C"))
        self.copy_text_action.setToolTip("The text generated so far, without the rejected drafts shown in the view")
        view_menu = self.menuBar().addMenu("&View")
        for dock in (self.controls_dock, self.drafters_dock, self.charts_dock, self.inspector_dock, self.theory_dock,
                     self.race_dock, self.guide_dock):
            view_menu.addAction(dock.toggleViewAction())
        self.hide_rejected_action = QAction("Hide rejected drafts", self, checkable=True)
        self.hide_rejected_action.toggled.connect(self.legend.hide_rejected.setChecked)
        view_menu.addAction(self.hide_rejected_action)
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction(self.guide_action)

    def _connect(self) -> None:
        self.controls.sig_generate.connect(self.start_generation)
        self.controls.sig_stop.connect(self.stop_generation)
        self.controls.sig_pause.connect(self.set_paused)
        self.controls.sig_step.connect(self.step)
        self.controls.sig_changed.connect(self.push_settings)
        self.drafters.sig_changed.connect(self.push_settings)
        self.token_view.sig_pass_selected.connect(self.sig_pass_selected)
        self.sig_pass_selected.connect(self.inspector.show_pass)
        self.session.sig_refresh.connect(self._inspect_stepped_pass)  # after the token view has drawn the pass
        self.race_view.sig_start_requested.connect(self.start_race)
        self.race_view.sig_stop_requested.connect(self.stop_race)
        self.guide.sig_use_prompt.connect(self.use_ready_prompt)
        self.guide.sig_race_prompt.connect(self.race_ready_prompt)
        self.legend.sig_hide_rejected.connect(self.token_view.set_hide_rejected)
        self.legend.sig_hide_rejected.connect(self.hide_rejected_action.setChecked)
        self.session.sig_refresh.connect(self._show_progress)
        self.session.sig_ended.connect(self._on_ended)
        self.session.sig_notice.connect(self._on_notice)

    # --- models ------------------------------------------------------------------------------
    def set_models(self, models, decoder, request: dict | None = None) -> None:
        """Use these models from now on (called after a successful load); an engine process they replace ends."""
        previous = self.decoder
        self.models, self.decoder = models, decoder
        if previous is not None and previous is not decoder:
            _close_engine(previous)
        if request is not None:
            self.model_request = dict(request)
        wanted = self._wanted_settings or self.live.get()
        self.drafters.set_available(tuple(models.available_drafters), int(models.num_layers),
                                    int(models.default_exit_layer))
        self.drafters.apply(wanted)
        self._wanted_settings = None
        self.status.show_models(models)
        self.status.showMessage("Models loaded", 4000)
        token_text = _token_speller(models, decoder)
        if token_text is not None:
            self.inspector.set_token_text(token_text)
        self.push_settings()
        self.sig_models_changed.emit(models)

    def load_models_async(self, request: dict, watch=None) -> ModelLoadThread | None:
        """Load in a thread; on failure the current models stay. None if a load is already running.

        `watch(thread)` is called before the thread starts, so even an instant failure reaches it.
        """
        if self._loader is not None:
            return None
        self._loader = ModelLoadThread(**request, in_process=not self.engine_process)
        self._loader.sig_loaded.connect(lambda models, decoder: self._on_loaded(models, decoder, request))
        self._loader.sig_failed.connect(self._on_load_failed)
        self._loader.sig_progress.connect(lambda message, *_: self.status.showMessage(message))
        self._loader.finished.connect(self._reap_loader)
        if watch is not None:
            watch(self._loader)
        self._loader.start()
        return self._loader

    def _reap_loader(self) -> None:
        if self._loader is not None:
            self._loader.wait()
            self._loader.deleteLater()
            self._loader = None

    def _on_loaded(self, models, decoder, request: dict) -> None:
        if not self._closing:
            self.set_models(models, decoder, request)

    def _on_load_failed(self, message: str) -> None:
        if self._closing:
            return
        kept = f" Still using {self.models.target_name}." if self.models is not None else ""
        self.show_message(f"Could not load the models: {message}{kept}", error=True)

    def open_model_dialog(self) -> ModelDialog:
        if self._dialog is not None:
            self._dialog.deleteLater()  # child of the window; one dialog at a time
        dialog = ModelDialog(self, current=self.model_request)
        self._dialog = dialog
        dialog.sig_load_requested.connect(lambda request: self._load_from_dialog(dialog, request))
        dialog.show()
        return dialog

    def _load_from_dialog(self, dialog: ModelDialog, request: dict) -> None:
        if self.is_busy:
            dialog.show_error("Stop the running generation or race before loading other models.")
            return
        if self.load_models_async(request, watch=dialog.watch) is None:
            dialog.show_error("A load is already running; wait for it to finish.")

    # --- generation ----------------------------------------------------------------------------
    @property
    def is_generating(self) -> bool:
        return self._generation is not None

    @property
    def is_racing(self) -> bool:
        return self._race is not None

    @property
    def is_busy(self) -> bool:
        return self.is_generating or self.is_racing

    def _ready_to_run(self) -> DecodeSettings | None:
        """The settings to run with, or None (with a message) when nothing can start now."""
        if self.is_busy:
            if self.is_racing:
                self.show_message("A race is running: wait for it or stop it first.", error=True)
            return None
        if self.decoder is None:
            self.show_message("No models are loaded yet: use File → Load models…", error=True)
            return None
        if not getattr(self.decoder, "alive", True):
            self._restart_engine()
            return None
        if not self.controls.prompt_text.strip():
            self.show_message("Type a prompt first.", error=True)
            return None
        self.drafters.flush()
        return self.push_settings()

    def _restart_engine(self) -> None:
        """The engine process has died (killed for memory, a crash in native code): load the models again."""
        if self._loader is None:
            self.load_models_async(self.model_request)
        self.show_message("The engine process had stopped; the models are loading again. "
                          "Press Generate once they are loaded.", error=True)

    def start_generation(self, paused: bool | None = None) -> bool:
        """Start a run with the current prompt and settings; False (with a message) if it cannot.

        `paused=None` follows Step mode: the run then waits before its first pass.
        """
        if paused is None:
            paused = self.step_mode_action.isChecked()
        settings = self._ready_to_run()
        if settings is None:
            return False
        self.hide_message()
        control = GenerationControl()
        if paused:
            control.pause()
        self.session.begin()
        self.token_view.clear_view()
        thread = GenerationThread(self.decoder, self.controls.prompt_text, self.live, control,
                                  chat_template=self.controls.chat_template.isChecked())
        thread.sig_event.connect(self.session.on_event)
        thread.sig_finished.connect(self._on_generation_finished)
        self._generation = thread
        self.controls.set_running(True)
        self.controls.show_paused(paused)
        self.load_action.setEnabled(False)
        thread.start()
        return True

    def stop_generation(self) -> None:
        if self._generation is not None:
            self._generation.control.stop()

    def set_paused(self, paused: bool) -> None:
        if self._generation is not None:
            (self._generation.control.pause if paused else self._generation.control.resume)()

    def step(self) -> None:
        """Run exactly one pass (starting a paused run first if none is running), then inspect it."""
        if self._generation is None and not self.start_generation(paused=True):
            return
        self._inspect_from = len(self.session.passes)
        self._generation.control.step()
        self.controls.show_paused(True)  # a step leaves the run paused
        self.inspector_dock.raise_()

    def run_on(self) -> None:
        """Continue a paused run to its end, or start one that does not pause."""
        if self._generation is None:
            self.start_generation(paused=False)
            return
        self.set_paused(False)
        self.controls.show_paused(False)

    def _inspect_stepped_pass(self) -> None:
        """Show the pass a Step ran, once it has arrived (the token view has drawn it by now)."""
        row = self._inspect_from
        if row is not None and len(self.session.passes) > row:
            self._inspect_from = None
            self.token_view.select_pass(row)

    def _on_generation_finished(self) -> None:
        thread, self._generation = self._generation, None
        if thread is None:
            return
        thread.wait()  # run() has emitted its last signal; make sure it has returned
        thread.deleteLater()
        self.controls.set_running(False)
        self.load_action.setEnabled(True)
        self._show_progress()
        self.sig_run_finished.emit()

    # --- race ------------------------------------------------------------------------------------
    def start_race(self) -> bool:
        """Race plain decoding against the current set-up on the current prompt; False if it cannot start."""
        settings = self._ready_to_run()
        if settings is None or self.models is None:
            return False
        self.hide_message()
        racer = getattr(self.decoder, "racer", None) or Race(self.models)  # an engine process races itself
        thread = GenerationThread(racer, self.controls.prompt_text, LiveSettings(settings),
                                  GenerationControl(), chat_template=self.controls.chat_template.isChecked())
        thread.sig_event.connect(self.race_view.on_event)
        thread.sig_finished.connect(self._on_race_finished)
        self._race = thread
        self.race_view.begin(_describe_setup(settings))
        self.controls.generate_button.setEnabled(False)
        self.load_action.setEnabled(False)
        self.race_dock.show()
        self.race_dock.raise_()
        thread.start()
        return True

    def stop_race(self) -> None:
        if self._race is not None:
            self._race.control.stop()

    def _on_race_finished(self) -> None:
        thread, self._race = self._race, None
        if thread is None:
            return
        thread.wait()
        thread.deleteLater()
        self.race_view.finished()
        self.controls.generate_button.setEnabled(not self.is_generating)
        self.load_action.setEnabled(True)
        self.sig_race_finished.emit()

    # --- guide -------------------------------------------------------------------------------------
    def show_guide(self) -> None:
        self.guide_dock.show()
        self.guide_dock.raise_()

    def use_ready_prompt(self, ready: ReadyPrompt) -> None:
        """Put a ready prompt and its set-up (drafters this model family has) into the controls."""
        self.controls.prompt.setPlainText(ready.prompt)
        available = getattr(self.models, "available_drafters", ready.drafters)
        chain = tuple(name for name in ready.drafters if name in available)
        try:
            settings = self.live.get().with_changes(drafters=chain, k=ready.k, verify=ready.verify)
        except SettingsError as error:
            self.drafters.show_error(str(error))
            return
        self.drafters.apply(settings)
        self.push_settings()

    def race_ready_prompt(self, ready: ReadyPrompt) -> None:
        self.use_ready_prompt(ready)
        self.start_race()

    def _on_ended(self, event) -> None:
        if event.reason == "error":
            kind = f"{event.error_type}: " if event.error_type else ""
            self.show_message(f"The generation failed — {kind}{event.error}. The text so far is kept.", error=True)
        else:
            self.status.showMessage(f"Finished: {event.reason.replace('_', ' ')} after {event.passes} passes", 8000)

    def _on_notice(self, notice) -> None:
        self.show_message(notice.message, error=notice.level != "info")

    def _show_progress(self) -> None:
        session = self.session
        self.status.show_run(session.tokens_per_s, session.alpha, len(session.passes), session.token_count)

    # --- settings --------------------------------------------------------------------------------
    def current_settings(self) -> DecodeSettings:
        """The settings the widgets describe; raises SettingsError."""
        base = self.drafters.settings_from(self.live.get())
        return base.with_changes(max_new_tokens=self.controls.max_tokens.value(), seed=self.controls.seed.value())

    def push_settings(self) -> DecodeSettings | None:
        """Write the widgets' settings into the live holder; an invalid value is shown inline, not raised."""
        try:
            settings = self.current_settings()
        except SettingsError as error:
            self.drafters.show_error(str(error))
            return None
        self.drafters.show_error(None)
        self.live.set(settings)
        return settings

    # --- messages ------------------------------------------------------------------------------------
    def show_message(self, text: str, error: bool = False) -> None:
        self.banner.setStyleSheet("color: #c0392b; font-weight: bold;" if error else "")
        self.banner.setText(text)
        self.banner.show()
        self.status.showMessage(text, 10000)
        (log.warning if error else log.info)(text)

    def hide_message(self) -> None:
        self.banner.hide()

    # --- export ----------------------------------------------------------------------------------------
    def export_run(self, kind: str, path: str) -> None:
        exporters = {"jsonl": self.session.export_jsonl, "csv": self.session.export_csv,
                     "text": self.session.export_text, "png": self.charts.export_png}
        exporters[kind](path)

    def copy_generated_text(self) -> str:
        """Put the text generated so far (also of a stopped or failed run) on the clipboard."""
        text = self.session.generated_text
        QApplication.clipboard().setText(text)
        self.status.showMessage(f"Copied {len(text)} characters", 4000)
        return text

    def _export_with_dialog(self, kind: str) -> None:
        title, pattern = EXPORTS[kind]
        path, _ = QFileDialog.getSaveFileName(self, title, "", pattern)
        if path:
            try:
                self.export_run(kind, path)
            except OSError as error:
                self.show_message(f"Could not write {path}: {error}", error=True)

    # --- persistence -------------------------------------------------------------------------------------
    def _restore(self) -> None:
        if self.store.status() != QSettings.Status.NoError:
            self._warn_store("the settings file could not be read")
            return
        for restore in (self._restore_layout, self._restore_models, self._restore_decode, self._restore_controls):
            try:
                restore()
            except (TypeError, ValueError, KeyError, SettingsError, json.JSONDecodeError) as error:
                self._warn_store(f"{restore.__name__.removeprefix('_restore_')}: {error}")

    def _warn_store(self, why: str) -> None:
        message = f"Saved settings ignored ({why}); defaults are used."
        log.warning(message)
        self.status.showMessage(message, 10000)

    def _restore_layout(self) -> None:
        geometry, state = self.store.value("window/geometry"), self.store.value("window/state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if isinstance(state, QByteArray):
            self.restoreState(state)

    def _default_layout(self) -> None:
        self.resize(1500, 950)
        horizontal, vertical = Qt.Orientation.Horizontal, Qt.Orientation.Vertical
        self.resizeDocks([self.controls_dock, self.drafters_dock], [330, 380], horizontal)
        self.resizeDocks([self.charts_dock], [380], vertical)

    def _restore_models(self) -> None:
        raw = self.store.value("models/request")
        if raw:
            request = json.loads(str(raw))
            if not isinstance(request, dict) or set(request) - set(DEFAULT_REQUEST):
                raise ValueError("unexpected model request")
            if not all(value is None or isinstance(value, str) for value in request.values()):
                raise ValueError("model names, device and dtype must be text")
            self.model_request = {**DEFAULT_REQUEST, **request}

    def _restore_decode(self) -> None:
        raw = self.store.value("decode/settings")
        if raw:
            settings = settings_from_dict(json.loads(str(raw)))
            self.live.set(settings)
            self._wanted_settings = settings
            self.drafters.apply(settings)
            self.controls.max_tokens.setValue(settings.max_new_tokens)
            self.controls.seed.setValue(settings.seed)

    def _restore_controls(self) -> None:
        self.controls.prompt.setPlainText(str(self.store.value("controls/prompt", "") or ""))
        self.controls.chat_template.setChecked(_as_bool(self.store.value("controls/chat_template", False)))
        self.legend.hide_rejected.setChecked(_as_bool(self.store.value("view/hide_rejected", False)))
        self.step_mode_action.setChecked(_as_bool(self.store.value("view/step_mode", False)))
        if not _as_bool(self.store.value("guide/seen", False)):
            self.show_guide()  # first launch: the guide is the tour

    def save_settings(self) -> None:
        self.store.setValue("window/geometry", self.saveGeometry())
        self.store.setValue("window/state", self.saveState())
        self.store.setValue("models/request", json.dumps(self.model_request))
        self.store.setValue("decode/settings", json.dumps(self.live.get().to_dict()))
        self.store.setValue("controls/prompt", self.controls.prompt_text)
        self.store.setValue("controls/chat_template", self.controls.chat_template.isChecked())
        self.store.setValue("view/hide_rejected", self.legend.hide_rejected.isChecked())
        self.store.setValue("view/step_mode", self.step_mode_action.isChecked())
        self.store.setValue("guide/seen", True)
        self.store.sync()

    # --- shutdown --------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the engine and join every thread; safe to call twice."""
        if self._generation is not None:
            self._generation.stop_and_join()
            self._on_generation_finished()
        if self._race is not None:
            self._race.stop_and_join()
            self._on_race_finished()
        if self._loader is not None:
            self._closing = True  # whatever the load still delivers is discarded
            self._loader.cancel()  # abandons the load at its next step; a model half read cannot be interrupted
            self._loader.wait()
            self._reap_loader()
        _close_engine(self.decoder)

    def closeEvent(self, event) -> None:
        self.hide()  # the window goes at once, even while a load finishes its current step
        self.shutdown()
        self.save_settings()
        super().closeEvent(event)


def _describe_setup(settings: DecodeSettings) -> str:
    chain = " → ".join(settings.drafters) or "no drafter"
    rule = settings.verify
    if rule == "asd":
        rule = f"ASD (B = {settings.asd.budget:g}, g = {settings.asd.gate:g}, M = {settings.asd.cap})"
    return f"{chain}, K = {settings.k}, {rule}"


def _token_speller(models, decoder):
    """token id -> text: an engine process's table, else the in-process tokenizer; None without either."""
    if hasattr(decoder, "token_text"):
        return decoder.token_text
    tokenizer = getattr(models, "tokenizer", None)
    return None if tokenizer is None else (lambda token_id: tokenizer.decode([token_id]))


def _close_engine(decoder) -> None:
    """End an engine process (an in-process decoder has nothing to end)."""
    close = getattr(decoder, "close", None)
    if close is not None:
        close()


def _as_bool(value) -> bool:
    return value is True or str(value).lower() in ("true", "1", "yes")


# --- entry points wired into the CLI -------------------------------------------------------------------
def _application(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(list(argv or [""]))
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    return app


def run_gui(argv: list[str] | None = None, target: str | None = None, draft: str | None = None,
            device: str | None = None, dtype: str | None = None) -> int:
    """Open the window; the given models, else the last used ones (else the demo family) load in the background."""
    app = _application(argv)
    window = MainWindow()
    window.show()
    request = dict(window.model_request)
    if target is not None:
        request.update(target=target, draft=draft)
    request.update({k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None})
    window.load_models_async(request)
    code = app.exec()
    window.deleteLater()  # before the QApplication goes away, so teardown order is Qt's
    return code


def render_screenshot(path: str, prompt: str | None = None, target: str | None = None,
                      draft: str | None = None, max_new_tokens: int = 120) -> None:
    """Offscreen: load, run one short real generation, wait for its end, save the window as PNG.

    Without a prompt, the guide's fallback-chain example runs with its drafters and K.
    """
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.engine.decoder import SpeculativeDecoder
    from app.engine.loading import load_models

    app = _application()
    with tempfile.TemporaryDirectory() as scratch:
        store = QSettings(str(Path(scratch) / "screenshot.ini"), QSettings.Format.IniFormat)  # never the user's
        window = MainWindow(settings=store)
        window.resize(1500, 950)
        window.show()
        models = load_models(target=target, draft=draft)
        window.set_models(models, SpeculativeDecoder(models), dict(DEFAULT_REQUEST, target=target, draft=draft))
        if prompt is None:
            window.use_ready_prompt(next(r for r in READY_PROMPTS if "draft-model" in r.drafters[1:]))
        else:
            window.controls.prompt.setPlainText(prompt)
        window.controls.max_tokens.setValue(max_new_tokens)
        _run_to_end(app, window)
        window.grab().save(str(path))
        window.shutdown()
        window.close()
        window.deleteLater()


def _run_to_end(app: QApplication, window: MainWindow) -> None:
    loop = QEventLoop()
    window.sig_run_finished.connect(loop.quit)
    if window.start_generation():
        loop.exec()
    window.charts.refresh()  # every plot now, not in the turns they take while a run streams
    QTimer.singleShot(50, loop.quit)  # let the last refresh tick and layout settle before grabbing
    loop.exec()
    app.processEvents()
