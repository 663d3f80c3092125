"""The only bridge between the engine and Qt: worker threads that re-emit engine output as signals.

`GenerationThread` runs one of an engine's streams (`engine.generate` or
`engine.race`) and emits every event object unchanged on `sig_event` (queued
to the GUI thread), then `sig_finished`. `ModelLoadThread` makes an `Engine`
off the GUI thread with the factory it is given: an engine process
(`EngineProcess`, the window's default) or one in this process (`LocalEngine.load`);
`cancel()` abandons it (the model dialog's Cancel, the status bar's, closing the window).

The engine's loop has no Qt event loop: stop, pause and single-step go
through the thread-safe `GenerationControl`, which the decoder checks between
passes. `stop_and_join` is the one way to end a thread: request the stop,
wake a paused decoder, wait until `run()` has returned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from PySide6.QtCore import Qt, QThread, Signal

from app.engine.engine import EngineFactory
from app.engine.errors import EngineError
from app.engine.events import EndEvent, RunningStats
from app.engine.load_request import LoadRequest
from app.engine.settings import GenerationControl, LiveSettings, SettingsError

# An engine stream: Engine.generate or Engine.race, called as (prompt, live, control, chat_template=...).
Stream = Callable[..., Iterator]

log = logging.getLogger(__name__)


def _forget_python_thread_record() -> None:
    """Drop the `threading` record of this Qt-started thread as it ends.

    Python < 3.12 registers a `_DummyThread` for a foreign thread the first
    time anything in it calls `threading.current_thread()` (logging does), and
    that record reports "alive" forever. Removing it keeps
    `threading.enumerate()` truthful about which threads still run.
    """
    active = threading._active  # type: ignore[attr-defined]  # noqa: SLF001 - no public API for this
    record = active.get(threading.get_ident())
    if isinstance(record, threading._DummyThread):  # noqa: SLF001
        active.pop(threading.get_ident(), None)


def error_end_event(error: BaseException, started: float) -> EndEvent:
    """An EndEvent for an exception that escaped the engine (the engine normally yields its own)."""
    return EndEvent(
        reason="error",
        token_ids=(),
        text="",
        passes=0,
        elapsed_s=time.perf_counter() - started,
        stats=RunningStats(alpha=None, tokens_per_pass=0.0, c=None, tokens_per_s=0.0),
        error=str(error) or type(error).__name__,
        error_type=type(error).__name__,
    )


class GenerationThread(QThread):
    """Runs one generation; every engine event is re-emitted as the same object, in order.

    Events cross to the GUI thread in batches: the engine thread queues them and
    wakes the GUI thread only when the queue was empty, so a fast engine costs
    one queued signal per GUI turn instead of one per event. `sig_event` then
    fires once per event on the GUI thread, before `sig_finished`.
    """

    sig_event = Signal(object)
    sig_finished = Signal()
    _sig_wake = Signal()

    def __init__(self, stream: Stream, prompt: str, live: LiveSettings, control: GenerationControl,
                 chat_template: bool = False, parent=None) -> None:
        super().__init__(parent)
        self._stream = stream
        self._prompt = prompt
        self.live = live
        self.control = control
        self._chat_template = chat_template
        self._queue: deque = deque()
        self._queue_lock = threading.Lock()
        self._sig_wake.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    def _publish(self, event) -> None:
        """Engine thread: queue an event; wake the GUI thread if it has nothing pending."""
        with self._queue_lock:
            wake = not self._queue
            self._queue.append(event)
        if wake:
            self._sig_wake.emit()

    def _deliver(self) -> None:
        """GUI thread: re-emit every queued event."""
        with self._queue_lock:
            events = list(self._queue)
            self._queue.clear()
        for event in events:
            self.sig_event.emit(event)

    def run(self) -> None:
        started = time.perf_counter()
        ended = False
        try:
            events = self._stream(self._prompt, self.live, self.control, chat_template=self._chat_template)
            for event in events:
                ended = isinstance(event, EndEvent)
                self._publish(event)
        except Exception as error:  # noqa: BLE001 - any failure must reach the window, not kill the thread
            _log_failure(error)
            if not ended:
                self._publish(error_end_event(error, started))
        finally:
            self.sig_finished.emit()
            _forget_python_thread_record()

    def stop_and_join(self, timeout_ms: int | None = None) -> bool:
        """Request a stop (also waking a paused decoder) and wait for `run` to return."""
        self.control.stop()
        if timeout_ms is None:
            return self.wait()
        return self.wait(timeout_ms)


def _log_failure(error: Exception) -> None:
    """A typed error (a bad prompt, an option the models lack) is the user's to read in the window: one line
    in the log, no traceback. Anything else is a bug: its traceback goes to the log."""
    if isinstance(error, EngineError | SettingsError):
        log.info("generation refused: %s: %s", type(error).__name__, error)
    else:
        log.exception("generation failed outside the engine's own error handling")


class LoadCancelled(Exception):
    """Raised from the progress callback to abandon a load at its next step (cancelled, or the window is
    closing)."""


class ModelLoadThread(QThread):
    """Makes an `Engine` for a target (+ drafter) off the GUI thread, with the factory it is given.

    `sig_progress(message, done, total)`: total 0 means "busy, size unknown".
    `sig_loaded(engine)` on success, `sig_failed(message)` otherwise; the thread emits neither after
    `cancel()`, which emits `sig_cancelled` once, in the thread that calls it. A signal the thread emitted
    just before the cancel can still be on its way through the event queue: receivers that must not act on
    a cancelled load check `cancelled` (and close an engine that arrives anyway).

    An engine process ends at once on `cancel`. A load in this process cannot be interrupted inside one
    model's weights, nor inside one compile, so there `cancel` takes effect at the next step the loader
    reports: the tokenizer, the target, the drafter, the learned heads and, with compiling on, between two
    compile warm-up steps ("compiling target: verify 8 rows (4/16)"). An engine finished after the cancel
    is closed, never delivered.
    """

    sig_progress = Signal(str, int, int)
    sig_loaded = Signal(object)  # Engine
    sig_failed = Signal(str)
    sig_cancelled = Signal()  # cancel() was called (once): no outcome will follow

    def __init__(self, factory: EngineFactory, request: LoadRequest, parent=None) -> None:
        super().__init__(parent)
        self.factory = factory
        self.request = request
        self._cancelled = threading.Event()
        self._cancel_lock = threading.Lock()

    def cancel(self) -> None:
        """Abandon the load (see the class docstring for when it stops); a second call does nothing."""
        with self._cancel_lock:
            first = not self._cancelled.is_set()
            self._cancelled.set()
        if first:
            self.sig_cancelled.emit()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def run(self) -> None:
        try:
            self.sig_progress.emit("Loading models…", 0, 0)
            engine = self._load()
            if not self.cancelled:
                self.sig_progress.emit("Loaded", 1, 1)
                self.sig_loaded.emit(engine)
        except LoadCancelled:
            log.info("model load cancelled")
        except Exception as error:  # noqa: BLE001 - shown in the dialog; previous models stay
            if not self.cancelled:
                self.sig_failed.emit(_load_error_message(error))
        finally:
            _forget_python_thread_record()

    def _load(self):
        engine = self.factory(self.request, self._report, lambda: self.cancelled)
        if self.cancelled:
            engine.close()  # cancelled after the last step: nobody will use it
        return engine

    def _report(self, fraction: float, message: str) -> None:
        """The engine's `progress(fraction, message)` callback, as a 0..1000 progress signal."""
        if self.cancelled:
            raise LoadCancelled
        self.sig_progress.emit(str(message), int(round(1000 * min(max(float(fraction), 0.0), 1.0))), 1000)


def _load_error_message(error: BaseException) -> str:
    if isinstance(error, EngineError):
        return str(error)
    return f"{type(error).__name__}: {error}"
