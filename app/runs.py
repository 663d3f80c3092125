"""The window's worker threads: one generation, one race and one model load at a time.

`RunController` starts them, forwards stop / pause / step to the running
generation, cancels a running load, and joins every thread it started: when
the thread ends (then it reports by a `sig_*` signal) or at `shutdown`. It
knows nothing of the widgets; the window reacts to its signals.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from app.engine.engine import Engine, EngineFactory
from app.engine.load_request import LoadRequest
from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings
from app.worker import GenerationThread, ModelLoadThread

EventSink = Callable[[object], None]  # receives each event on the GUI thread


class RunController(QObject):
    sig_run_finished = Signal()  # the generation thread has ended and was joined
    sig_race_finished = Signal()  # the race thread has ended and was joined
    sig_loaded = Signal(object, object)  # (Engine, the LoadRequest it was loaded from); never after shutdown
    sig_load_failed = Signal(str)  # never after shutdown
    sig_load_cancelled = Signal()  # the running load was cancelled (its thread may still be ending); not at shutdown
    sig_load_progress = Signal(str, int, int)  # (message, done, total); total 0 = busy, size unknown

    def __init__(self, factory: EngineFactory, parent=None) -> None:
        super().__init__(parent)
        self.factory = factory
        self._generation: GenerationThread | None = None
        self._race: GenerationThread | None = None  # runs an engine race: both lanes in one thread
        self._loader: ModelLoadThread | None = None  # the load whose outcome has not arrived yet
        self._ending: set[ModelLoadThread] = set()  # loads that have delivered their outcome, threads not joined
        self._closing = False  # once set, results of loads still in flight are discarded
        self._min_pass_interval = 0.0  # slow motion of generations (seconds between passes; 0 = full speed)

    # --- state -----------------------------------------------------------------------------
    @property
    def is_generating(self) -> bool:
        return self._generation is not None

    @property
    def is_racing(self) -> bool:
        return self._race is not None

    @property
    def is_loading(self) -> bool:
        return self._loader is not None

    @property
    def loader(self) -> ModelLoadThread | None:
        """The running load (whose outcome has not arrived yet), if any."""
        return self._loader

    # --- generation ------------------------------------------------------------------------
    def start_generation(self, engine: Engine, prompt: str, live: LiveSettings, paused: bool,
                         chat_template: bool, on_event: EventSink) -> None:
        control = GenerationControl()
        control.set_min_pass_interval(self._min_pass_interval)
        if paused:
            control.pause()
        thread = GenerationThread(engine.generate, prompt, live, control, chat_template=chat_template)
        thread.sig_event.connect(on_event)
        thread.sig_finished.connect(self._on_generation_finished)
        self._generation = thread
        thread.start()

    def stop_generation(self) -> None:
        if self._generation is not None:
            self._generation.control.stop()

    def set_paused(self, paused: bool) -> None:
        if self._generation is not None:
            (self._generation.control.pause if paused else self._generation.control.resume)()

    def set_min_pass_interval(self, seconds: float) -> None:
        """Slow motion for this generation and the next ones: at least `seconds` between passes."""
        self._min_pass_interval = seconds
        if self._generation is not None:
            self._generation.control.set_min_pass_interval(seconds)

    def step(self) -> None:
        """Let a paused generation run exactly one more pass."""
        if self._generation is not None:
            self._generation.control.step()

    def _on_generation_finished(self) -> None:
        thread, self._generation = self._generation, None
        if thread is None:
            return
        thread.wait()  # run() has emitted its last signal; make sure it has returned
        thread.deleteLater()
        self.sig_run_finished.emit()

    # --- race ------------------------------------------------------------------------------
    def start_race(self, engine: Engine, prompt: str, settings: DecodeSettings, chat_template: bool,
                   on_event: EventSink) -> None:
        """One set-up for the whole race: later edits of the live settings do not reach it."""
        thread = GenerationThread(engine.race, prompt, LiveSettings(settings), GenerationControl(),
                                  chat_template=chat_template)
        thread.sig_event.connect(on_event)
        thread.sig_finished.connect(self._on_race_finished)
        self._race = thread
        thread.start()

    def stop_race(self) -> None:
        if self._race is not None:
            self._race.control.stop()

    def _on_race_finished(self) -> None:
        thread, self._race = self._race, None
        if thread is None:
            return
        thread.wait()
        thread.deleteLater()
        self.sig_race_finished.emit()

    # --- loading ---------------------------------------------------------------------------
    def load(self, request: LoadRequest,
             watch: Callable[[ModelLoadThread], None] | None = None) -> ModelLoadThread | None:
        """Make an engine in a thread; None if a load is already running.

        `watch(thread)` is called before the thread starts, so even an instant failure reaches it.
        """
        if self._loader is not None:
            return None
        loader = self._loader = ModelLoadThread(self.factory, request)
        loader.sig_loaded.connect(lambda engine: self._on_loaded(loader, engine, request))
        loader.sig_failed.connect(lambda message: self._on_load_failed(loader, message))
        loader.sig_progress.connect(lambda message, done, total: self._on_load_progress(loader, message, done, total))
        loader.sig_cancelled.connect(lambda: self._on_load_cancelled(loader))
        loader.finished.connect(lambda: self._reap_loader(loader))
        if watch is not None:
            watch(loader)
        loader.start()
        return loader

    def cancel_load(self) -> bool:
        """Cancel the running load: the models in use stay. False if none is running.

        From now on nothing of that load arrives (no progress, no engine, no failure), and another load
        may start; its thread ends by itself (an engine process at once, a load in this process at its
        next step) and is joined then.
        """
        if self._loader is None:
            return False
        self._loader.cancel()  # -> _on_load_cancelled
        return True

    def _on_load_progress(self, loader: ModelLoadThread, message: str, done: int, total: int) -> None:
        if loader is self._loader and not loader.cancelled:  # a step queued before a cancel is not news
            self.sig_load_progress.emit(message, done, total)

    def _on_load_cancelled(self, loader: ModelLoadThread) -> None:
        current = loader is self._loader
        self._release(loader)
        if current and not self._closing:
            self.sig_load_cancelled.emit()

    def _on_loaded(self, loader: ModelLoadThread, engine: Engine, request: LoadRequest) -> None:
        self._release(loader)
        if loader.cancelled or self._closing:
            engine.close()  # it finished as the cancel came: nobody will use it
            return
        self.sig_loaded.emit(engine, request)

    def _on_load_failed(self, loader: ModelLoadThread, message: str) -> None:
        self._release(loader)
        if not self._closing and not loader.cancelled:
            self.sig_load_failed.emit(message)

    def _release(self, loader: ModelLoadThread) -> None:
        """The load's outcome is out: no longer loading (a run may start), though its thread may still be ending."""
        if self._loader is loader:
            self._loader = None
            self._ending.add(loader)

    def _reap_loader(self, loader: ModelLoadThread) -> None:
        self._release(loader)
        if loader in self._ending:  # not reaped yet
            self._ending.discard(loader)
            loader.wait()
            loader.deleteLater()

    # --- shutdown --------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop and join every thread (each reports its end as usual); safe to call twice."""
        if self._generation is not None:
            self._generation.stop_and_join()
            self._on_generation_finished()
        if self._race is not None:
            self._race.stop_and_join()
            self._on_race_finished()
        self._closing = True  # whatever a load still delivers is discarded
        loader = self._loader
        if loader is not None:
            loader.cancel()  # abandons the load at its next step; a model half read cannot be interrupted
            self._reap_loader(loader)
        for loader in list(self._ending):
            self._reap_loader(loader)
