"""Entry points of the window, wired into the CLI: open it, or render it to a PNG; and the process policy
they set, that the history of a run is kept out of the garbage collector's reach."""

from __future__ import annotations

import gc
import os
import tempfile
from pathlib import Path

from PySide6.QtCore import QEventLoop, QObject, QSettings, QTimer
from PySide6.QtWidgets import QApplication

from app.engine.engine import LocalEngine
from app.engine.remote import EngineProcessStarter
from app.main_window import APPLICATION, ORGANIZATION, MainWindow
from app.session import Session
from app.settings_store import DEFAULT_REQUEST
from app.widgets.guide import READY_PROMPTS

FREEZE_EVERY_PASSES = 256  # at most this many passes of history are ever walked by a collection


class HistoryOutOfCollector(QObject):
    """Puts every object alive out of reach of Python's cyclic garbage collector (gc.freeze, O(1)) when a run
    starts, every FREEZE_EVERY_PASSES passes, and when it ends.

    A full collection walks every tracked object on the GUI thread: with torch and transformers imported
    and a long run's history (thousands of small event objects) that is 400+ ms of frozen window. The
    history holds no reference cycles, so reference counting still frees it when the next run begins;
    frozen, it is simply never walked. Freezing before a run's thread starts also keeps a collection that
    happens on that thread (the engine's own gc.collect after an out-of-memory error) from finalising Qt
    objects left over from earlier, which can deadlock it with the GUI thread. Whatever opens a window
    (the entry points here, the tests, tools/measure/soak.py) installs this policy on its session.
    """

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self._session = session
        self._frozen_blocks = 0  # blocks of FREEZE_EVERY_PASSES passes already frozen in this run
        session.sig_begun.connect(self._on_begun)  # before the run's thread starts
        session.sig_refresh.connect(self._on_refresh)
        session.sig_ended.connect(lambda _event: gc.freeze())

    def _on_begun(self) -> None:
        self._frozen_blocks = 0
        gc.freeze()  # what the app holds already (modules, models, widgets) is never walked

    def _on_refresh(self) -> None:
        blocks = len(self._session.passes) // FREEZE_EVERY_PASSES
        if blocks > self._frozen_blocks:
            self._frozen_blocks = blocks
            gc.freeze()


def qt_application(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(list(argv or [""]))
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    return app


def run_gui(argv: list[str] | None = None, target: str | None = None, draft: str | None = None,
            device: str | None = None, dtype: str | None = None, engines: EngineProcessStarter | None = None) -> int:
    """Open the window; the given models, else the last used ones (else the demo family) load in the background.

    `engines`: what makes the window's engines (the CLI makes it before importing this module, so that a
    process it starts ahead imports torch while Qt and the window start); else a process per load."""
    try:
        app = qt_application(argv)
        window = MainWindow()
        if engines is not None:
            window.runs.factory = engines
        HistoryOutOfCollector(window.session)
        request = dict(window.model_request)
        if target is not None:
            request.update(target=target, draft=draft)
        request.update({k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None})
        window.load_models_async(request)  # first: the engine process loads while the window lays out and paints
        window.show()
        code = app.exec()
        window.deleteLater()  # before the QApplication goes away, so teardown order is Qt's
        return code
    finally:
        if engines is not None:
            engines.close()  # the process started ahead, if no load took it


def render_screenshot(path: str, prompt: str | None = None, target: str | None = None, draft: str | None = None,
                      max_new_tokens: int = 120, size: tuple[int, int] = (1500, 950)) -> None:
    """Offscreen: load, run one short real generation, wait for its end, save the window as PNG.

    Without a prompt, the guide's fallback-chain example runs with its drafters and K.
    """
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = qt_application()
    with tempfile.TemporaryDirectory() as scratch:
        store = QSettings(str(Path(scratch) / "screenshot.ini"), QSettings.Format.IniFormat)  # never the user's
        window = MainWindow(settings=store)
        HistoryOutOfCollector(window.session)
        window.resize(*size)
        window.show()
        request = dict(DEFAULT_REQUEST, target=target, draft=draft)
        window.set_engine(LocalEngine.load(request), request)
        if prompt is None:
            window.use_ready_prompt(next(r for r in READY_PROMPTS if "draft-model" in r.drafters[1:]))
        else:
            window.controls.prompt.setPlainText(prompt)
        window.controls.max_tokens.setValue(max_new_tokens)
        run_to_end(app, window)
        window.grab().save(str(path))
        window.shutdown()
        window.close()
        window.deleteLater()


def run_to_end(app: QApplication, window: MainWindow) -> None:
    loop = QEventLoop()
    window.sig_run_finished.connect(loop.quit)
    if window.start_generation():
        loop.exec()
    window.charts.refresh()  # every plot now, not in the turns they take while a run streams
    QTimer.singleShot(50, loop.quit)  # let the last refresh tick and layout settle before grabbing
    loop.exec()
    app.processEvents()
