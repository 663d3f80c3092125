"""The playground window: assembles the widgets and reacts to what they ask for.

Data flows one way: widgets -> SettingsModel (live settings) / RunController ->
engine (in a worker thread) -> events -> Session -> widgets on the session's
refresh tick. The window holds one `Engine` (app/engine/engine.py) and its
`ModelsSummary`; where the engine runs is only the choice of factory:
an engine process (app/engine/remote.py, the default, so drawing never takes
Python turns away from decoding) or this process (`engine_process=False`,
which tests use to patch the loader).

Thread lifecycle lives in app/runs.py, settings persistence in
app/settings_store.py, the launch and screenshot entry points in app/launch.py.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QByteArray, QSettings, Qt, Signal
from PySide6.QtGui import QAction, QFont, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QTabBar,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.engine.engine import Engine, LocalEngine, ModelsSummary
from app.engine.load_request import LoadRequest
from app.engine.remote import EngineProcess
from app.engine.settings import DecodeSettings, LiveSettings, RepetitionSettings
from app.runs import RunController
from app.session import Session
from app.settings_model import SettingsModel
from app.settings_store import DEFAULT_REQUEST, SavedControls, SavedLayout, SavedState, SettingsStore
from app.widgets import scrolled
from app.widgets.acceptance_histogram import AcceptanceHistogramView, end_of_run_figures
from app.widgets.asd_tradeoff import AsdTradeoffView
from app.widgets.charts import RunCharts
from app.widgets.controls import ControlsPanel
from app.widgets.drafter_panel import DrafterPanel
from app.widgets.guide import READY_PROMPTS, GuidePanel, ReadyPrompt
from app.widgets.inspector import PassInspector
from app.widgets.legend import TokenLegend
from app.widgets.model_dialog import ModelDialog
from app.widgets.race import RaceView
from app.widgets.speed import SpeedControl
from app.widgets.status import RunStatusBar, short_model_name
from app.widgets.theory import TheoryExplorer
from app.widgets.token_view import TokenView
from app.worker import ModelLoadThread

log = logging.getLogger(__name__)
ORGANIZATION = "SpeculativeDecodingPlayground"
APPLICATION = "Playground"
EXPORTS = {
    "jsonl": ("Export events (JSON lines)", "JSON lines (*.jsonl)"),
    "csv": ("Export per-pass statistics (CSV)", "CSV (*.csv)"),
    "text": ("Export text", "Text (*.txt)"),
    "png": ("Export charts (PNG)", "PNG image (*.png)"),
}
CLASSROOM_FONT_SCALE = 1.5  # the Classroom layout's fonts, for a projector at the back of a room
BUNDLED_HINT = ("The bundled models are tiny: they know Python code and its documentation, "
                "and write no stories or chat.")
BUNDLED_PLACEHOLDER = ("Python code or a sentence of its documentation, e.g. def fibonacci(n): — "
                       "then press Ctrl+Enter. The bundled models write no stories.")
DEFAULT_PLACEHOLDER = "Type a prompt, then press Ctrl+Enter"
FIRST_PROMPT = next(r.prompt for r in READY_PROMPTS if r.prompt.startswith("for i in range"))  # code they know
QUEUED_MESSAGE = "The models are loading (progress in the status bar): your run starts as soon as they are ready."
LOAD_HOW = "load some with File → Load models… (Ctrl+L)"


class MainWindow(QMainWindow):
    sig_models_changed = Signal(object)  # ModelsSummary of the engine now in use
    sig_run_finished = Signal()  # the generation thread has ended and was joined
    sig_pass_selected = Signal(int)  # a token was clicked: index of its pass (for the inspector)
    sig_race_finished = Signal()  # the race thread has ended and was joined

    def __init__(self, settings: QSettings | None = None, parent=None, engine_process: bool = True) -> None:
        super().__init__(parent)
        self.setWindowTitle("Speculative Decoding Playground")
        self.store = SettingsStore(settings if settings is not None else QSettings(ORGANIZATION, APPLICATION))
        self.engine: Engine | None = None
        self.summary: ModelsSummary | None = None
        self.model_request: LoadRequest = DEFAULT_REQUEST
        self.session = Session(self)
        self.runs = RunController(EngineProcess if engine_process else LocalEngine.load, self)
        self._inspect_from: int | None = None  # a Step was asked: inspect the first pass at or after this row
        self._queued_run: bool | None = None  # Generate was pressed while loading: start (paused?) once loaded
        self._dialog: ModelDialog | None = None
        self._build_widgets()
        self.settings_model = SettingsModel(self.drafters, self.controls, self)
        self._build_docks()
        self._build_toolbar()
        self._build_menus()
        self._connect()
        self._default_layout()
        self._default_state = self.saveState()  # what View → Reset layout returns to
        self._restore(self.store.load())

    # --- construction --------------------------------------------------------------------
    def _build_widgets(self) -> None:
        self.controls = ControlsPanel()
        self.token_view = TokenView()
        self.token_view.set_session(self.session)
        self.legend = TokenLegend()
        self.drafters = DrafterPanel()
        self.charts = RunCharts()
        self.charts.set_session(self.session)
        self.acceptance_view = AcceptanceHistogramView()
        self.acceptance_view.set_session(self.session)
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
        self.asd_view = AsdTradeoffView()
        self.asd_view.load()
        self.guide = GuidePanel()
        central = QWidget()
        column = QVBoxLayout(central)
        column.addWidget(self.legend)
        column.addWidget(self.banner)
        column.addWidget(self.token_view, 1)
        self.setCentralWidget(central)

    def _dock(self, title: str, name: str, widget: QWidget, area: Qt.DockWidgetArea | None = None,
              scroll: bool = True) -> QDockWidget:
        """A dock holding `widget`, in a scroll area unless it scrolls itself: no panel's minimum size may
        push the window past a small screen (1024x700). Without an `area` it is placed by `_tabify`."""
        dock = QDockWidget(title, self)
        dock.setObjectName(name)  # saveState/restoreState key
        dock.setWidget(scrolled(widget) if scroll else widget)
        if area is not None:
            self.addDockWidget(area, dock)
        return dock

    def _build_docks(self) -> None:
        left, right = Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea
        self.controls_dock = self._dock("Prompt", "promptDock", self.controls, left)
        self.drafters_dock = self._dock("Drafters and verification", "draftersDock", self.drafters, right)
        self.charts_dock = self._dock("Charts", "chartsDock", self.charts, Qt.DockWidgetArea.BottomDockWidgetArea,
                                      scroll=False)  # its grid of plots scrolls inside, below a minimum height
        self.acceptance_dock = self._dock("Acceptance", "acceptanceDock", self.acceptance_view)
        self.inspector_dock = self._dock("Pass inspector", "inspectorDock", self.inspector)
        self.theory_dock = self._dock("Theory explorer", "theoryDock", self.theory)
        self.race_dock = self._dock("Race", "raceDock", self.race_view)
        self.asd_dock = self._dock("ASD trade-off", "asdDock", self.asd_view, scroll=False)  # its side scrolls
        self.guide_dock = self._dock("Guide", "guideDock", self.guide, scroll=False)  # the browser scrolls and wraps
        self._tabify(self.charts_dock, self.acceptance_dock, self.inspector_dock, self.theory_dock, self.race_dock,
                     self.asd_dock)
        self._tabify(self.drafters_dock, self.guide_dock)
        self.charts_dock.raise_()
        self.drafters_dock.raise_()

    def _tabify(self, first: QDockWidget, *others: QDockWidget) -> None:
        """Tab `others` behind `first`, which is in an area already.

        Each of `others` is placed here only, never added to an area first, and the window's layout is clean
        before the first tab: otherwise Qt lays the window out again while it makes the group's tab bar, and
        that nested layout makes a second bar for the same group, which shows as a grey block over the text
        until the event loop deletes it."""
        self.layout().activate()
        for dock in others:
            self.tabifyDockWidget(first, dock)

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
        self.speed = SpeedControl()
        bar.addSeparator()
        bar.addWidget(QLabel(" Speed "))
        bar.addWidget(self.speed)
        self.addToolBar(bar)

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        self.load_action = file_menu.addAction("Load &models…", self.open_model_dialog)
        self.load_action.setShortcut(QKeySequence("Ctrl+L"))
        file_menu.addSeparator()
        for kind, (title, _) in EXPORTS.items():
            file_menu.addAction(title + "…", lambda kind=kind: self._export_with_dialog(kind))
        file_menu.addSeparator()
        self.open_sweep_action = file_menu.addAction("Open ASD sweep…", self.asd_view.choose_file)
        file_menu.addSeparator()
        file_menu.addAction("&Quit", QKeySequence.StandardKey.Quit, self.close)
        edit_menu = self.menuBar().addMenu("&Edit")
        self.copy_text_action = edit_menu.addAction("Copy generated &text", self.copy_generated_text)
        self.copy_text_action.setShortcut(QKeySequence("Ctrl+Shift+C"))
        self.copy_text_action.setToolTip("The text generated so far, without the rejected drafts shown in the view")
        view_menu = self.menuBar().addMenu("&View")
        for dock in (self.controls_dock, self.drafters_dock, self.charts_dock, self.inspector_dock, self.theory_dock,
                     self.race_dock, self.asd_dock, self.guide_dock):
            view_menu.addAction(dock.toggleViewAction())
        self.hide_rejected_action = QAction("Hide rejected drafts", self, checkable=True)
        self.hide_rejected_action.toggled.connect(self.legend.hide_rejected.setChecked)
        view_menu.addAction(self.hide_rejected_action)
        view_menu.addSeparator()
        self.reset_layout_action = view_menu.addAction("&Reset layout", self.reset_layout)
        self.classroom_action = QAction("&Classroom layout (large fonts)", self, checkable=True)
        self.classroom_action.setToolTip("Larger fonts in every panel and chart, for a projector")
        self.classroom_action.toggled.connect(self.set_classroom)
        view_menu.addAction(self.classroom_action)
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction(self.guide_action)

    def _connect(self) -> None:
        self.controls.sig_generate.connect(self.start_generation)
        self.controls.sig_stop.connect(self.stop_generation)
        self.controls.sig_pause.connect(self.set_paused)
        self.controls.sig_step.connect(self.step)
        self.token_view.sig_pass_selected.connect(self.sig_pass_selected)
        self.sig_pass_selected.connect(self.inspector.show_pass)
        self.inspector.sig_pass_shown.connect(self.token_view.highlight_pass)  # previous / next move the highlight
        self.sig_pass_selected.connect(lambda _index: (self.inspector_dock.show(), self.inspector_dock.raise_()))
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
        self.session.sig_started.connect(lambda start: self.status.show_execution(start.execution))
        self.runs.sig_run_finished.connect(self._on_generation_finished)
        self.runs.sig_race_finished.connect(self._on_race_finished)
        self.runs.sig_loaded.connect(self.set_engine)
        self.runs.sig_load_failed.connect(self._on_load_failed)
        self.runs.sig_load_cancelled.connect(self._on_load_cancelled)
        self.runs.sig_load_progress.connect(self.status.show_load_progress)
        self.status.sig_cancel_load.connect(self.cancel_load)
        self.speed.sig_interval_changed.connect(self.runs.set_min_pass_interval)
        self.speed.sig_interval_changed.connect(self.charts.set_pass_interval)  # Throughput says it is compute speed
        self.charts_dock.visibilityChanged.connect(self.charts.on_visibility_changed)  # a raised tab: no showEvent
        self.acceptance_dock.visibilityChanged.connect(self.acceptance_view.on_visibility_changed)
        self.drafters.sig_changed.connect(self._show_asd_knobs)  # after the settings model pushed them
        self.asd_dock.visibilityChanged.connect(self._show_asd_knobs)  # settings applied without a change signal
        self.session.sig_ended.connect(lambda end: self.asd_view.show_run(end.asd, len(end.token_ids), end.passes))

    def _show_asd_knobs(self, *_args) -> None:
        self.asd_view.show_knobs(self.settings_model.live.get().asd)

    # --- models ------------------------------------------------------------------------------
    def set_engine(self, engine: Engine, request: LoadRequest | None = None) -> None:
        """Use this engine from now on (called after a successful load); an engine it replaces is closed."""
        previous, self.engine, self.summary = self.engine, engine, engine.summary
        if previous is not None and previous is not engine:
            previous.close()
        if request is not None:
            self.model_request = request
        suggested = self.settings_model.offer_models(engine.summary)
        self.controls.offer_chat_template(engine.summary.has_chat_template)
        self._describe_models()
        self.status.end_load_progress()
        self.status.show_models(engine.summary)
        self.hide_message()  # whatever was said before (loading, a failed run) is over
        self.status.showMessage(models_loaded_message(engine.summary.suggested_repetition if suggested else None),
                                8000 if suggested else 4000)
        self.inspector.set_token_text(engine.token_text)
        self.sig_models_changed.emit(engine.summary)
        self._start_queued_run()

    @property
    def bundled_models(self) -> bool:
        """The bundled demo family is loaded (what the hints and the first prompt are written for)."""
        return self.summary is not None and self.model_request.bundled

    def _describe_models(self) -> None:
        """Say what the loaded models can do; give a newcomer a first prompt they handle well."""
        bundled = self.bundled_models
        self.controls.set_model_hint(BUNDLED_HINT if bundled else "",
                                     BUNDLED_PLACEHOLDER if bundled else DEFAULT_PLACEHOLDER)
        if bundled and not self.controls.prompt_text.strip():
            self.controls.prompt.setPlainText(FIRST_PROMPT)

    def _start_queued_run(self) -> None:
        paused, self._queued_run = self._queued_run, None
        if paused is not None:
            self.start_generation(paused)

    def load_models_async(self, request: LoadRequest, watch=None) -> ModelLoadThread | None:
        """Load in a thread; on failure the current models stay. None if a load is already running.

        `watch(thread)` is called before the thread starts, so even an instant failure reaches it.
        """
        return self.runs.load(request, watch)

    @property
    def is_loading(self) -> bool:
        return self.runs.is_loading

    def _on_load_failed(self, message: str) -> None:
        self._queued_run = None
        self.status.end_load_progress()
        kept = f" Still using {short_model_name(self.summary.target_name)}." if self.summary is not None else ""
        self.show_message(f"Could not load the models: {message}{kept}", error=True)

    def cancel_load(self) -> bool:
        """Cancel the running load (the status bar's Cancel; the dialog cancels the load it watches itself);
        the models in use stay. False if no load runs."""
        return self.runs.cancel_load()

    def _on_load_cancelled(self) -> None:
        """The load was cancelled: keep the models in use, end its progress, drop a run queued for it."""
        queued, self._queued_run = self._queued_run is not None, None
        self.status.end_load_progress()
        if self.summary is not None:
            text = f"Load cancelled; still using {short_model_name(self.summary.target_name)}."
            if queued:
                text += " The run you queued was not started: press Generate to run on these models."
        else:
            text = f"Load cancelled: no models are loaded; {LOAD_HOW}."
            if queued:
                text += " The run you queued was not started."
        self.show_message(text)

    def open_model_dialog(self) -> ModelDialog:
        if self._dialog is not None:
            self._dialog.deleteLater()  # child of the window; one dialog at a time
        loader = self.runs.loader
        dialog = ModelDialog(self, current=self.model_request if loader is None else loader.request)
        self._dialog = dialog
        dialog.sig_load_requested.connect(lambda request: self._load_from_dialog(dialog, request))
        if loader is not None:
            dialog.watch(loader)  # the load running (the one at start-up, say): its progress, and Cancel
        dialog.show()
        return dialog

    def _load_from_dialog(self, dialog: ModelDialog, request: LoadRequest) -> None:
        if self.is_busy:
            dialog.show_error("Stop the running generation or race before loading other models.")
            return
        if self.load_models_async(request, watch=dialog.watch) is None:
            dialog.show_error("A load is already running: wait for it, or cancel it in the status bar.")

    # --- generation ----------------------------------------------------------------------------
    @property
    def is_generating(self) -> bool:
        return self.runs.is_generating

    @property
    def is_racing(self) -> bool:
        return self.runs.is_racing

    @property
    def is_busy(self) -> bool:
        return self.is_generating or self.is_racing

    def _ready_to_run(self) -> DecodeSettings | None:
        """The settings to run with, or None (with a message) when nothing can start now."""
        if self.is_busy:
            if self.is_racing:
                self.show_message("A race is running: wait for it or stop it first.", error=True)
            return None
        if self.is_loading:
            self.show_message("The models are still loading (progress in the status bar): "
                              "start once they are ready.")
            return None
        if self.engine is None:
            self.show_message("No models are loaded yet: use File → Load models…", error=True)
            return None
        if not self.engine.alive:
            self._restart_engine()
            return None
        if not self.controls.prompt_text.strip():
            self.show_message("Type a prompt first.", error=True)
            return None
        return self.settings_model.flush()

    def _restart_engine(self) -> None:
        """The engine process has died (killed for memory, a crash in native code): load the models again."""
        if not self.is_loading:
            self.load_models_async(self.model_request)
        self.show_message("The engine process had stopped; the models are loading again. "
                          "Press Generate once they are loaded.", error=True)

    def start_generation(self, paused: bool | None = None) -> bool:
        """Start a run with the current prompt and settings; False (with a message) if it cannot.

        `paused=None` follows Step mode: the run then waits before its first pass. While models load, the run
        is queued (False now) and starts once they are ready.
        """
        if paused is None:
            paused = self.step_mode_action.isChecked()
        if self.is_loading and not self.is_busy:
            self._queued_run = paused
            self.show_message(QUEUED_MESSAGE)
            return False
        if self._ready_to_run() is None:
            return False
        self.hide_message()
        self.session.begin()
        self.token_view.clear_view()
        self.controls.set_running(True)
        self.controls.show_paused(paused)
        self.load_action.setEnabled(False)
        self.runs.start_generation(self.engine, self.controls.prompt_text, self.live, paused,
                                   self.controls.chat_template.isChecked(), self.session.on_event)
        return True

    def stop_generation(self) -> None:
        self.runs.stop_generation()

    def set_paused(self, paused: bool) -> None:
        self.runs.set_paused(paused)

    def step(self) -> None:
        """Run exactly one pass (starting a paused run first if none is running), then inspect it."""
        if not self.is_generating and not self.start_generation(paused=True):
            return
        self._inspect_from = len(self.session.passes)
        self.runs.step()
        self.controls.show_paused(True)  # a step leaves the run paused
        self.inspector_dock.raise_()

    def run_on(self) -> None:
        """Continue a paused run to its end, or start one that does not pause."""
        if not self.is_generating:
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
        self.controls.set_running(False)
        self.load_action.setEnabled(True)
        self._show_progress()
        self.sig_run_finished.emit()

    # --- race ------------------------------------------------------------------------------------
    def start_race(self) -> bool:
        """Race plain decoding against the current set-up on the current prompt; False if it cannot start."""
        settings = self._ready_to_run()
        if settings is None:
            return False
        self.hide_message()
        self.race_view.begin(_describe_setup(settings))
        self.controls.generate_button.setEnabled(False)
        self.load_action.setEnabled(False)
        self.race_dock.show()
        self.race_dock.raise_()
        self.runs.start_race(self.engine, self.controls.prompt_text, settings, self.controls.chat_template.isChecked(),
                             self.race_view.on_event)
        return True

    def stop_race(self) -> None:
        self.runs.stop_race()

    def _on_race_finished(self) -> None:
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
        available = self.summary.available_drafters if self.summary is not None else ready.drafters
        chain = tuple(name for name in ready.drafters if name in available)
        self.settings_model.use(drafters=chain, k=ready.k, verify=ready.verify)

    def race_ready_prompt(self, ready: ReadyPrompt) -> None:
        self.use_ready_prompt(ready)
        self.start_race()

    def _on_ended(self, event) -> None:
        if event.reason == "error":
            kind = f"{event.error_type}: " if event.error_type else ""
            self.show_message(f"The generation failed — {kind}{event.error}. The text so far is kept.", error=True)
        else:
            figures = end_of_run_figures(event.acceptance)
            self.status.showMessage(f"Finished: {event.reason.replace('_', ' ')} after {event.passes} passes"
                                    + (f"; {figures}" if figures else ""), 8000)

    def _on_notice(self, notice) -> None:
        self.show_message(notice.message, error=notice.level != "info")

    def _show_progress(self) -> None:
        session = self.session
        self.status.show_run(session.tokens_per_s, session.alpha, len(session.passes), session.token_count,
                             session.acceptance_rate, session.stats)

    # --- settings --------------------------------------------------------------------------------
    @property
    def live(self) -> LiveSettings:
        """The settings the engine reads at every pass (owned by the settings model)."""
        return self.settings_model.live

    def current_settings(self) -> DecodeSettings:
        """The settings the widgets describe; raises SettingsError."""
        return self.settings_model.current()

    def push_settings(self) -> DecodeSettings | None:
        """Write the widgets' settings into the live holder; an invalid value is shown inline, not raised."""
        return self.settings_model.push()

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
    def _default_layout(self) -> None:
        self.resize(1500, 950)
        self._size_docks()

    def _size_docks(self) -> None:
        horizontal, vertical = Qt.Orientation.Horizontal, Qt.Orientation.Vertical
        self.resizeDocks([self.controls_dock, self.drafters_dock], [330, 380], horizontal)
        self.resizeDocks([self.charts_dock], [max(380, self.height() * 12 // 25)], vertical)

    def reset_layout(self) -> None:
        """Every dock back where it starts: shown, docked, tabbed, at its default size."""
        for dock in self.findChildren(QDockWidget):
            dock.setFloating(False)
        self._restore_dock_state(self._default_state)
        for dock in self.findChildren(QDockWidget):
            dock.show()
        self.charts_dock.raise_()
        self.drafters_dock.raise_()
        self._size_docks()

    def set_classroom(self, on: bool) -> None:
        """Large fonts for a projector (on), or the normal ones (off)."""
        scale = CLASSROOM_FONT_SCALE if on else 1.0
        font = QFont(QApplication.font())
        font.setPointSizeF(font.pointSizeF() * scale)
        self.setFont(font)
        self.charts.set_text_scale(scale)
        self.classroom_action.setChecked(on)

    def _restore(self, saved: SavedState) -> None:
        """Show what was saved; each part that was not (or was corrupted) keeps its default."""
        for warning in saved.warnings:
            self.status.showMessage(warning, 10000)
        if saved.layout is not None:
            self._restore_layout(saved.layout)
        if saved.model_request is not None:
            self.model_request = saved.model_request
        if saved.decode is not None:
            self.settings_model.restore(saved.decode)
        if saved.controls is not None:
            self._restore_controls(saved.controls)

    def _restore_layout(self, layout: SavedLayout) -> None:
        if layout.geometry is not None:
            self.restoreGeometry(layout.geometry)
        if layout.state is not None:
            self._restore_dock_state(layout.state)

    def _restore_dock_state(self, state: QByteArray) -> bool:
        """restoreState, and hide the tab bars it replaced: Qt gives every tabbed group a bar that no group held
        before and retires the old ones only when the layout is next applied (deletes them when the event loop
        next runs); until then they would show where their groups were. A bar with no tabs is no group's."""
        old = [bar for bar in self.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly)
               if bar.count() > 0]
        if not self.restoreState(state):
            return False  # the old layout and its bars stay
        for bar in old:
            bar.hide()
        return True

    def _restore_controls(self, controls: SavedControls) -> None:
        self.controls.prompt.setPlainText(controls.prompt)
        self.controls.chat_template.setChecked(controls.chat_template)
        self.legend.hide_rejected.setChecked(controls.hide_rejected)
        self.step_mode_action.setChecked(controls.step_mode)
        if not controls.guide_seen:
            self.show_guide()  # first launch: the guide is the tour

    def save_settings(self) -> None:
        controls = SavedControls(
            prompt=self.controls.prompt_text, chat_template=self.controls.chat_template.isChecked(),
            hide_rejected=self.legend.hide_rejected.isChecked(), step_mode=self.step_mode_action.isChecked(),
            guide_seen=True)
        self.store.save(SavedLayout(self.saveGeometry(), self.saveState()), self.model_request, self.live.get(),
                        controls)

    # --- shutdown --------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the engine and join every thread; safe to call twice."""
        self.runs.shutdown()
        if self.engine is not None:
            self.engine.close()

    def resizeEvent(self, event) -> None:
        """On a smaller screen the charts give back room to the text, down to their minimum (then they scroll)."""
        super().resizeEvent(event)
        share = self.height() * 9 // 20
        if self.charts_dock.height() > share and not self.charts_dock.isFloating():
            self.resizeDocks([self.charts_dock], [share], Qt.Orientation.Vertical)

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


def models_loaded_message(suggested: RepetitionSettings | None) -> str:
    """The status line after a load; says so when the repetition controls took the models' suggestion."""
    if suggested is None:
        return "Models loaded"
    return f"Models loaded; {suggested.describe()}, as they suggest (small models loop without it)"
