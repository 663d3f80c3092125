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

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QStackedWidget,
    QTabBar,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.engine.engine import Engine, LocalEngine, ModelsSummary
from app.engine.load_request import LoadRequest
from app.engine.paths import heads_folder_problem, model_path_problem
from app.engine.remote import EngineProcess
from app.engine.settings import DecodeSettings, LiveSettings, RepetitionSettings
from app.runs import RunController
from app.session import Session
from app.settings_model import SettingsModel
from app.settings_store import DEFAULT_REQUEST, SavedControls, SavedLayout, SavedState, SettingsStore
from app.teaching.lesson import LessonRun, LessonStep
from app.widgets import scrolled
from app.widgets.acceptance_histogram import AcceptanceHistogramView, end_of_run_figures
from app.widgets.asd_tradeoff import AsdTradeoffView
from app.widgets.charts import RunCharts
from app.widgets.classroom_layout import CLASSROOM_FONT_SCALE, ClassroomDocks, classroom_font, size_window_text
from app.widgets.controls import ControlsPanel
from app.widgets.drafter_panel import DrafterPanel
from app.widgets.guide import READY_PROMPTS, GuidePanel, ReadyPrompt
from app.widgets.inspector import PassInspector
from app.widgets.legend import TokenLegend
from app.widgets.lesson import LessonPanel
from app.widgets.model_dialog import ModelDialog
from app.widgets.presentation import KEYS, TEXT_ONLY, PresentationPage
from app.widgets.race import RaceView
from app.widgets.speed import SpeedControl
from app.widgets.status import RunStatusBar, short_model_name
from app.widgets.theme import theme_hub
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
CHARTS_SHARE_PERCENT = 52  # of a tall window's height
SMALL_CHARTS_SHARE_PERCENT = 45  # of a window under TALL_WINDOW_PX
TALL_WINDOW_PX = 900
MIN_CHARTS_PX = 200
SIDE_PANEL_FRAME_PX = 30  # a side dock's frame and its scroll area's vertical bar
FIRST_START_GUIDE = "Guide: start here"  # the guide's tab title until it is first opened
BUNDLED_HINT = ("The bundled models are tiny: they know Python code and its documentation, "
                "and write no stories or chat.")
BUNDLED_PLACEHOLDER = ("Python code or a sentence of its documentation, e.g. def fibonacci(n): — "
                       "then press Ctrl+Enter. The bundled models write no stories.")
DEFAULT_PLACEHOLDER = "Type a prompt, then press Ctrl+Enter"
FIRST_PROMPT = next(r.prompt for r in READY_PROMPTS if r.prompt.startswith("for i in range"))  # code they know
QUEUED_MESSAGE = "The models are loading (progress in the status bar): your run starts as soon as they are ready."
LOAD_HOW = "load some with File → Load models… (Ctrl+L)"
PRESENTATION_KEY = "F11"
SHORTCUTS = (
    ("Ctrl+Enter", "generate"), ("Esc", "stop the run"), ("F10", "step: run one pass"), ("F5", "run on"),
    ("F1", "the guide"), ("Ctrl+L", "load models"), ("Ctrl+Shift+C", "copy the generated text"),
    (PRESENTATION_KEY, "presentation mode"), ("Ctrl+Q", "quit"),
)
ABOUT = ("<b>Speculative Decoding Playground</b><p>Watch a small drafter propose tokens and a large target "
         "verify them in one forward pass: greedy, sampling (Leviathan et al. 2023, Chen et al. 2023) and ASD, "
         "with nine drafters, token trees and the theory beside the measurements.</p>")


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
        self.lesson = LessonPanel()
        self._lesson_step: LessonStep | None = None  # the lesson step whose run is going
        normal = QWidget()
        column = QVBoxLayout(normal)
        column.addWidget(self.legend)
        column.addWidget(self.banner)
        column.addWidget(self.token_view, 1)
        self.presentation = PresentationPage()
        self.presentation.set_session(self.session)
        self.pages = QStackedWidget()
        self.pages.addWidget(normal)
        self.pages.addWidget(self.presentation)
        self.setCentralWidget(self.pages)
        self._normal_state: QByteArray | None = None  # the docks as they were before presentation mode
        self._previous_run: list = []  # the shown run's events: put back when the next one fails before starting
        self.confirm_quit = self._ask_quit  # asked before quitting during a run (tests answer it themselves)

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
        self.lesson_dock = self._dock("Lesson", "lessonDock", self.lesson)
        self._tabify(self.charts_dock, self.acceptance_dock, self.inspector_dock, self.theory_dock, self.race_dock,
                     self.asd_dock)
        self._tabify(self.drafters_dock, self.guide_dock, self.lesson_dock)
        self.lesson_dock.hide()  # Help → Guided lesson opens it
        self.classroom_docks = ClassroomDocks(self, [self.controls_dock, self.drafters_dock, self.guide_dock,
                                                     self.lesson_dock], [self.controls, self.drafters],
                                              self.charts_dock, self.charts, self._restore_dock_state,
                                              self.controls.generate_button, {self.race_dock: self.race_view})
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
        file_menu.addAction("&Quit", QKeySequence.StandardKey.Quit, self.request_quit)
        edit_menu = self.menuBar().addMenu("&Edit")
        self.copy_text_action = edit_menu.addAction("Copy generated &text", self.copy_generated_text)
        self.copy_text_action.setShortcut(QKeySequence("Ctrl+Shift+C"))
        self.copy_text_action.setToolTip("The text generated so far, without the rejected drafts shown in the view")
        view_menu = self.menuBar().addMenu("&View")
        for dock in (self.controls_dock, self.drafters_dock, self.charts_dock, self.inspector_dock, self.theory_dock,
                     self.race_dock, self.asd_dock, self.guide_dock, self.lesson_dock):
            view_menu.addAction(dock.toggleViewAction())
        self.hide_rejected_action = QAction("Hide rejected drafts", self, checkable=True)
        self.hide_rejected_action.toggled.connect(self.legend.hide_rejected.setChecked)
        view_menu.addAction(self.hide_rejected_action)
        view_menu.addSeparator()
        self.reset_layout_action = view_menu.addAction("&Reset layout", self.reset_layout)
        self.classroom_action = QAction("&Classroom layout (large fonts)", self, checkable=True)
        self.classroom_action.setToolTip("Larger fonts everywhere and the panels arranged for a projector")
        self.classroom_action.toggled.connect(self.set_classroom)
        view_menu.addAction(self.classroom_action)
        self.pass_rows_action = QAction("&One pass per line", self, checkable=True, shortcut=QKeySequence("Ctrl+R"))
        self.pass_rows_action.setToolTip("Each pass on its own line: accepted drafts, the rejected draft struck "
                                         "through, then the correction or the bonus (Leviathan et al., Figure 1)")
        self.pass_rows_action.toggled.connect(self.set_pass_rows)
        view_menu.addAction(self.pass_rows_action)
        self.presentation_action = QAction("&Presentation mode", self, checkable=True,
                                           shortcut=QKeySequence(PRESENTATION_KEY))
        self.presentation_action.setToolTip("One large stream and one large chart, high contrast, keyboard-driven")
        self.presentation_action.toggled.connect(self.set_presentation)
        view_menu.addAction(self.presentation_action)
        self._build_presentation_keys()
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction(self.guide_action)
        self.lesson_action = help_menu.addAction("Guided &lesson", self.show_lesson)
        help_menu.addAction("&Keyboard shortcuts", self.show_shortcuts)
        help_menu.addAction("&About", lambda: QMessageBox.about(self, "About", ABOUT))

    def _build_presentation_keys(self) -> None:
        """Keys that work only in presentation mode (they would steal typing in the prompt otherwise)."""
        page = self.presentation
        keys = [("Space", self.step), ("Left", lambda: self.move_pass(-1)), ("Right", lambda: self.move_pass(1)),
                ("R", self.pass_rows_action.toggle), ("PgUp", lambda: page.step_view(-1)),
                ("PgDown", lambda: page.step_view(1)), ("Esc", lambda: self.presentation_action.setChecked(False))]
        keys += [(str(view), lambda _checked=False, view=view: page.show_view(view)) for view in range(page.view_count)]
        self.presentation_keys: list[QAction] = []
        for key, slot in keys:
            action = QAction(key, self, shortcut=QKeySequence(key))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            action.triggered.connect(slot)
            action.setEnabled(False)
            self.addAction(action)
            self.presentation_keys.append(action)

    def _connect(self) -> None:
        self.controls.sig_generate.connect(self.start_generation)
        self.controls.sig_stop.connect(self.stop_generation)
        self.controls.sig_pause.connect(self.set_paused)
        self.controls.sig_step.connect(self.step)
        self.token_view.sig_pass_selected.connect(self.sig_pass_selected)
        self.sig_pass_selected.connect(self.inspector.show_pass)
        self.inspector.sig_pass_shown.connect(self.token_view.highlight_pass)  # previous / next move the highlight
        self.sig_pass_selected.connect(self._show_inspector)
        self.session.sig_refresh.connect(self._inspect_stepped_pass)  # after the token view has drawn the pass
        self.race_view.sig_start_requested.connect(self.start_race)
        self.race_view.sig_stop_requested.connect(self.stop_race)
        self.guide.sig_use_prompt.connect(self.use_ready_prompt)
        self.guide.sig_race_prompt.connect(self.race_ready_prompt)
        self.lesson.sig_run_step.connect(self.run_lesson_step)
        self.session.sig_ended.connect(self._lesson_step_ended)
        self.legend.sig_hide_rejected.connect(self.token_view.set_hide_rejected)
        self.legend.sig_hide_rejected.connect(self.presentation.stream.set_hide_rejected)
        self.presentation.stream.sig_pass_selected.connect(self.sig_pass_selected)
        self.inspector.sig_pass_shown.connect(self.presentation.stream.highlight_pass)
        theme_hub().sig_changed.connect(self.presentation.apply_theme)
        self.settings_model.sig_invalid.connect(self._show_active_drafter)  # emitted by every push (None: valid)
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

    def _show_inspector(self, _index: int = 0) -> None:
        if not self.presenting:  # presentation mode keeps its two large views
            self.inspector_dock.show()
            self.inspector_dock.raise_()

    def _show_active_drafter(self, *_args) -> None:
        """The status bar's model label names the drafter the run uses now (the first of the chain)."""
        if self.summary is not None:
            drafters = self.settings_model.live.get().drafters
            self.status.show_models(self.summary, drafters[0] if drafters else None)

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
        self._show_active_drafter()
        self.controls.limit_max_tokens(engine.summary.context_length)
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

        `watch(thread)` is called before the thread starts, so even an instant failure reaches it. A folder that
        does not exist is reported at once, with no load (and no progress bar) started.
        """
        problem = request_path_problem(request)
        if problem is not None and not self.is_loading:
            self._on_load_failed(problem)
            return None
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
        problem = request_path_problem(request)
        if problem is not None:  # said at once, with no progress bar for a load that cannot start
            dialog.show_error(f"Could not load the models: {problem}")
            self._on_load_failed(problem)
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
        self._previous_run = list(self.session.events)
        self.session.begin()
        self.token_view.clear_view()
        self.presentation.stream.clear_view()
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
        if not self.presenting:
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
            self._stream().select_pass(row)

    def _stream(self) -> TokenView:
        return self.presentation.stream if self.presenting else self.token_view

    def move_pass(self, delta: int) -> None:
        """Select the previous (-1) or next (+1) pass in the stream and the inspector (the last one if none is)."""
        passes = self.session.passes
        if not passes:
            return
        shown = self.inspector.inspection
        if shown is None:
            row = len(passes) - 1
        else:
            row = next((r for r, event in enumerate(passes) if event.index == shown.event.index), len(passes) - 1)
            row = max(0, min(len(passes) - 1, row + delta))
        self._stream().select_pass(row)

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

    # --- the guided lesson ---------------------------------------------------------------------------------
    def show_lesson(self) -> None:
        self.lesson_dock.show()
        self.lesson_dock.raise_()

    def run_lesson_step(self, step: LessonStep) -> bool:
        """Run a lesson step on the loaded models (or reuse the run on view when it has the step's settings)."""
        if self.is_busy or self.summary is None:
            self.lesson.show_failure("Wait for the run to end (or the models to load), then run the step again.")
            return False
        changes = step.settings_changes(self.summary.available_drafters)
        self.controls.max_tokens.setValue(changes.pop("max_new_tokens"))
        if self.bundled_models:
            self.controls.prompt.setPlainText(FIRST_PROMPT)
        settings = self.settings_model.use(**changes)
        self._lesson_step = step
        start = self.session.start
        if (settings is not None and start is not None and self.session.end is not None
                and self.session.end.reason != "error" and start.settings == settings.to_dict()
                and start.prompt_text == self.controls.prompt_text):
            self._lesson_step_ended(self.session.end)  # the run on view is this step's run
            return True
        if not self.start_generation(paused=False):
            self._lesson_step = None
            self.lesson.show_failure(self.banner.text() or "The step could not start.")
            return False
        return True

    def _lesson_step_ended(self, end) -> None:
        step, self._lesson_step = self._lesson_step, None
        if step is None:
            return
        if self.session.start is None or end.reason == "error":
            self.lesson.show_failure(f"The step's run failed: {failure_text(end.error or '')}")
            return
        run = LessonRun(self.session.start.settings, tuple(self.session.passes), end)
        explanation = self.lesson.show_result(step, run)
        if explanation.pass_index is not None:
            row = next((r for r, event in enumerate(self.session.passes) if event.index == explanation.pass_index),
                       None)
            if row is not None:
                self._stream().select_pass(row)
        views = {"inspector": self.inspector_dock, "theory": self.theory_dock, "charts": self.charts_dock,
                 "asd": self.asd_dock}
        if not self.presenting:
            views[step.view].show()
            views[step.view].raise_()
        self.lesson_dock.raise_()

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
            log.info("generation failed with %s", event.error_type)
            before_start = self.session.start is None
            kept = ("The previous output is kept." if before_start and self._previous_run
                    else "The text generated so far is kept.")
            self.show_message(f"The generation failed: {failure_text(event.error)} {kept}", error=True)
            if before_start and self._previous_run:
                QTimer.singleShot(0, self._restore_previous_run)  # once every slot has seen this end
        else:
            figures = end_of_run_figures(event.acceptance)
            self.status.showMessage(f"Finished: {event.reason.replace('_', ' ')} after {event.passes} passes"
                                    + (f"; {figures}" if figures else ""), 8000)

    def _restore_previous_run(self) -> None:
        """Show the run before a run that failed before its first event again, as it was."""
        events, self._previous_run = self._previous_run, []
        if self.is_generating or self.session.start is not None:
            return  # a new run began meanwhile
        banner = self.banner.text()
        self.session.sig_ended.disconnect(self._on_ended)
        try:
            self.session.begin()
            for event in events:
                self.session.on_event(event)
            self.session.flush()
        finally:
            self.session.sig_ended.connect(self._on_ended)
        self._previous_run = events
        self._show_progress()
        self.show_message(banner, error=True)

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
        """Side panels take a share of the width (the stream keeps at least about half of a 1024 px window),
        the charts a share of the height."""
        if self.classroom_docks.on:
            self.classroom_docks.size_docks()
            return
        self._size_side_docks()
        self.resizeDocks([self.charts_dock], [self._charts_share()], Qt.Orientation.Vertical)

    def _size_side_docks(self) -> None:
        """Each side panel a share of the width, but never less than its content needs (no sideways scrolling)."""
        width = self.width()
        room = SIDE_PANEL_FRAME_PX
        prompt = max(_clamp(width * 22 // 100, 230, 360), self.controls.minimumSizeHint().width() + room)
        drafters = _clamp(width * 25 // 100, 280, 420)
        self.resizeDocks([self.controls_dock, self.drafters_dock], [prompt, drafters], Qt.Orientation.Horizontal)

    def _charts_share(self) -> int:
        """The charts' height: a larger share of a taller window (the plots take the arrangement that fits it:
        app/widgets/charts.py); a small window keeps room for the prompt's buttons and the text."""
        percent = CHARTS_SHARE_PERCENT if self.height() >= TALL_WINDOW_PX else SMALL_CHARTS_SHARE_PERCENT
        return max(MIN_CHARTS_PX, self.height() * percent // 100)

    # --- presentation mode -------------------------------------------------------------------------------
    @property
    def presenting(self) -> bool:
        return self.pages.currentWidget() is self.presentation

    def set_presentation(self, on: bool) -> None:
        """One large stream and one large chart, high contrast, keys for everything (on); the docks back (off)."""
        if on == self.presenting:
            return
        if on:
            self._normal_state = self.saveState()
            for dock in self.findChildren(QDockWidget):
                dock.hide()
            for bar in self.findChildren(QToolBar):
                bar.hide()
            self.pages.setCurrentWidget(self.presentation)
        else:
            self.pages.setCurrentIndex(0)
            if self._normal_state is not None:
                self._restore_dock_state(self._normal_state)
            for bar in self.findChildren(QToolBar):
                bar.show()
        theme_hub().set_presentation(on)
        size_window_text(self, self.presenting)
        for action in self.presentation_keys:
            action.setEnabled(on)
        if on:
            self.presentation.show_view(self.presentation.view or TEXT_ONLY)
            self.presentation.focus_stream()
        else:
            self.classroom_docks.follow(self.classroom_action.isChecked())  # it may have been chosen meanwhile
        self.presentation_action.setChecked(on)

    def set_pass_rows(self, on: bool) -> None:
        """One pass per line in both streams (on), or the flowing text (off)."""
        self.token_view.set_pass_rows(on)
        self.presentation.stream.set_pass_rows(on)
        self.pass_rows_action.setChecked(on)

    def show_shortcuts(self) -> QMessageBox:
        rows = [*SHORTCUTS, ("", ""), *(("", "<b>In presentation mode</b>"),), *KEYS]
        table = "".join(f"<tr><td><b>{key}</b>&nbsp;&nbsp;</td><td>{what}</td></tr>" for key, what in rows)
        box = QMessageBox(QMessageBox.Icon.NoIcon, "Keyboard shortcuts", f"<table>{table}</table>",
                          QMessageBox.StandardButton.Close, self)
        box.setObjectName("shortcutsBox")
        box.show()
        return box

    def reset_layout(self) -> None:
        """Every dock back where it starts: shown, docked, tabbed, at its default size."""
        for dock in self.findChildren(QDockWidget):
            dock.setFloating(False)
        self._restore_dock_state(self._default_state)
        for dock in self.findChildren(QDockWidget):
            dock.show()
        self.charts_dock.raise_()
        self.drafters_dock.raise_()
        if self.classroom_docks.on:
            self.classroom_docks.forget()
            self.classroom_docks.enter()
        self._size_docks()

    def set_classroom(self, on: bool) -> None:
        """Large fonts and the docks arranged for a projector (on: app/widgets/classroom_layout.py), or the normal
        fonts and the docks as they were (off)."""
        scale = CLASSROOM_FONT_SCALE if on else 1.0
        self.setFont(classroom_font(scale))
        self.charts.set_text_scale(scale)
        self.classroom_action.setChecked(on)
        size_window_text(self, self.presenting)
        if not self.presenting:  # presentation mode has no docks: they follow when it ends
            self.classroom_docks.follow(on)
        QTimer.singleShot(0, self._size_docks)  # the panels' sizes at the new text size, once laid out

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
        self.speed.set_rate(controls.passes_per_s)
        self.set_pass_rows(controls.pass_rows)
        if not controls.guide_seen:
            self._offer_guide()

    def _offer_guide(self) -> None:
        """First launch: the guide's tab waits beside the drafter panel, which stays in front (a first run
        needs the drafters and K; the charts stay in view below), its title inviting until it is first opened."""
        self.guide_dock.show()
        self.drafters_dock.raise_()
        self.guide_dock.setWindowTitle(FIRST_START_GUIDE)
        self.guide_dock.setToolTip("A tour of the window, with ready prompts (F1)")
        self.guide_dock.visibilityChanged.connect(self._guide_opened)

    def _guide_opened(self, visible: bool) -> None:
        if visible:
            self.guide_dock.setWindowTitle("Guide")
            self.guide_dock.visibilityChanged.disconnect(self._guide_opened)

    def save_settings(self) -> None:
        controls = SavedControls(
            prompt=self.controls.prompt_text, chat_template=self.controls.chat_template.isChecked(),
            hide_rejected=self.legend.hide_rejected.isChecked(), step_mode=self.step_mode_action.isChecked(),
            guide_seen=True, passes_per_s=self.speed.rate, pass_rows=self.pass_rows_action.isChecked())
        state = self.classroom_docks.state_before  # the docks as the user arranged them, outside the two modes
        if state is None:
            state = self._normal_state if self.presenting and self._normal_state is not None else self.saveState()
        self.store.save(SavedLayout(self.saveGeometry(), state), self.model_request, self.live.get(),
                        controls)

    # --- shutdown --------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the engine and join every thread; safe to call twice."""
        self.runs.shutdown()
        if self.engine is not None:
            self.engine.close()

    def resizeEvent(self, event) -> None:
        """The charts grow and shrink with the window (their share of its height), so a larger window shows
        all of them; below their minimum they scroll."""
        super().resizeEvent(event)
        if self.classroom_docks.on:
            self.classroom_docks.size_docks()
            return
        if event.oldSize().height() != event.size().height() and not self.charts_dock.isFloating():
            self.resizeDocks([self.charts_dock], [self._charts_share()], Qt.Orientation.Vertical)
        if event.oldSize().width() != event.size().width():
            self._size_side_docks()

    def _ask_quit(self) -> bool:
        answer = QMessageBox.question(self, "Quit", "A run is in progress. Stop it and quit?",
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def request_quit(self) -> bool:
        """File → Quit (Ctrl+Q): during a run, ask first; True if the window closed."""
        if self.is_busy and not self.confirm_quit():
            return False
        return self.close()

    def closeEvent(self, event) -> None:
        # The window's close button asks as Quit does; a close from code (shutdown, tests) never asks.
        if event.spontaneous() and self.is_busy and not self.confirm_quit():
            event.ignore()
            return
        self.hide()  # the window goes at once, even while a load finishes its current step
        self.shutdown()
        self.save_settings()
        super().closeEvent(event)


def request_path_problem(request: LoadRequest) -> str | None:
    """What is wrong with the model or heads folders a load request names, before anything loads (None: a hub id
    or a folder that looks loadable)."""
    for name in (request.target, request.draft):
        if name and (problem := model_path_problem(name)) is not None:
            return problem
    return heads_folder_problem(request.heads) if request.heads else None


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def failure_text(error: str) -> str:
    """An engine's failure message as one clause of the banner, ending in exactly one period."""
    return (error.strip().rstrip(".") or "an unexpected error") + "."


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
