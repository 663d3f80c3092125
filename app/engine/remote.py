"""The engine in a process of its own, driven like an in-process decoder.

Python runs one thread at a time per process: a window drawing charts in the
same process as the decoder takes its turns away from the decoder's Python.
`EngineProcess` loads the models in a child process and streams the same
event objects back through a pipe, so the window and the engine each keep a
CPU core to themselves.

    engine = EngineProcess(LoadRequest())                  # loads in the child; raises ModelLoadError ...
    for event in engine.generate(prompt, live, control):     # the Engine contract (app/engine/engine.py)
        ...
    for event in engine.race(prompt, settings):               # both lanes run in the child
        ...
    engine.close()

While a run streams, every change of the caller's `LiveSettings` and
`GenerationControl` is pushed to the child as it happens (their `watch`), so
live toggles, pause, step and stop behave as they do in process; the parent
polls the pipe only to notice a child that died. One run at a time.

Most of a child's start-up is importing torch and transformers, before it
needs to know which models to load. `EngineProcessStarter` starts a child
ahead, as the very first thing the app does (where a core is free for it),
and hands it the models to load when the window asks for them:

    engines = EngineProcessStarter()           # with more than two cores, the child starts importing now
    ...                                        # meanwhile: Qt, the window, the saved settings
    engine = engines(request, progress, cancelled)   # an EngineFactory: that child loads `request`

The messages are the frozen dataclasses of app/engine/protocol.py, dispatched with `match` on both sides.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from app.engine import errors
from app.engine.engine import ModelsSummary
from app.engine.load_request import LoadRequest
from app.engine.protocol import (
    CloseEngine,
    ControlChange,
    ErrorReport,
    LiveChange,
    LoadFailed,
    LoadModels,
    LoadProgress,
    ModelsLoaded,
    RunDone,
    RunEvent,
    RunKind,
    RunRaised,
    RunStarted,
    StartRun,
    ToChild,
    ToParent,
)
from app.engine.settings import ControlRequests, DecodeSettings, GenerationControl, LiveSettings, SettingsError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

POLL_S = 0.02  # how often a waiting parent checks that the child lives (and, loading, whether it was cancelled)
CLOSE_GRACE_S = 0.1  # how long a closing engine may take to end by itself before it is terminated
DRAIN_S = 10.0  # how long an abandoned run may take to notice its stop before the process is ended
AHEAD_MIN_CORES = 3  # an engine process started ahead of the window needs a core of its own beside it
_TYPED_ERRORS = {cls.__name__: cls for cls in (
    SettingsError, errors.ModelLoadError, errors.IncompatibleTokenizerError,
    errors.ContextTooLongError, errors.OutOfMemoryError,
)}


class EngineProcessError(errors.EngineError):
    """The engine process could not be started, was cancelled, or stopped unexpectedly."""


# --- parent side ----------------------------------------------------------------------------------------------
class EngineChild:
    """A started engine process without models yet: it imports torch, transformers and the engine while the
    caller goes on, then loads the models of the `LoadModels` message it is sent (`EngineProcess` sends
    it). Ended unused, or once its parent is gone, it loads nothing."""

    def __init__(self, threads: int | None = None) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a process that runs Qt or CUDA
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=serve, args=(child_end, threads), name="speculative-engine",
                                       daemon=True)
        self.process.start()
        child_end.close()

    def close(self, timeout_s: float = CLOSE_GRACE_S) -> None:
        """End the child (asking first, then terminating); safe to call twice."""
        if self.process.is_alive():
            try:
                self.conn.send(CloseEngine())
            except OSError:
                pass
            self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(1.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class EngineProcessStarter:
    """An `EngineFactory` (app/engine/engine.py) whose first engine process starts when the starter is made,
    where that pays.

    Made first thing, before the window imports Qt and builds itself, that child imports torch and
    transformers (most of its start-up) meanwhile, so the first models are ready sooner. That pays only on
    a core of its own: on two cores the window and the child share what the rest of the machine leaves, and
    the window opens later while the models are hardly sooner (BENCHMARKS.md, "Start-up"). So by default the
    child starts ahead with more than two cores (`ahead=None`); else the first load starts it, as later
    loads do, each a process of its own as `EngineProcess` makes.
    """

    def __init__(self, threads: int | None = None, ahead: bool | None = None) -> None:
        self._threads = threads
        self._lock = threading.Lock()  # called from a loading thread; closed from the GUI thread
        if ahead is None:
            ahead = (os.cpu_count() or 1) >= AHEAD_MIN_CORES
        self._ahead: EngineChild | None = EngineChild(threads) if ahead else None

    def __call__(self, request: LoadRequest | Mapping[str, Any], progress: Callable[[float, str], None] | None = None,
                 cancelled: Callable[[], bool] = lambda: False) -> EngineProcess:
        return EngineProcess(request, progress, cancelled, self._threads, child=self._take())

    def close(self) -> None:
        """End the child started ahead if no engine took it; engines made already are their owners' to close."""
        child = self._take()
        if child is not None:
            child.close()

    def _take(self) -> EngineChild | None:
        with self._lock:
            child, self._ahead = self._ahead, None
        return child


class EngineProcess:
    """A child process holding the models and a decoder; `generate` and `race` stream its events here.

    Implements the `Engine` protocol of app/engine/engine.py, so the class itself is an engine factory."""

    def __init__(self, request: LoadRequest | Mapping[str, Any], progress: Callable[[float, str], None] | None = None,
                 cancelled: Callable[[], bool] = lambda: False, threads: int | None = None,
                 child: EngineChild | None = None) -> None:
        """Start a child (or take `child`, one started ahead) and wait until it has loaded `request`
        (a `LoadRequest`, or its dict). `threads` is the new child's; a child started ahead has its own.

        Raises the loader's typed error (ModelLoadError, OutOfMemoryError ...) or EngineProcessError;
        the child is gone then. `cancelled()` is polled while waiting: True ends the child at once.
        """
        self._child = child if child is not None else EngineChild(threads)
        self._conn, self._process = self._child.conn, self._child.process
        self._lock = threading.Lock()  # one run at a time
        self._send_lock = threading.Lock()  # a run's reader and the threads that push its changes share the pipe
        self._token_texts: tuple[str, ...] = ()
        try:
            self._send(LoadModels(LoadRequest.of(request)))
            self.summary: ModelsSummary = self._await_load(progress or (lambda fraction, message: None), cancelled)
        except BaseException:
            self.close()  # a failed child is on its way out; a cancelled one need not finish
            raise

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    @property
    def pid(self) -> int | None:
        """The child's process id (what a system monitor, or an out-of-memory killer, sees)."""
        return self._process.pid

    def token_text(self, token_id: int) -> str:
        """The target tokenizer's text of one token id ("" for an id it does not have), without the tokenizer."""
        return self._token_texts[token_id] if 0 <= token_id < len(self._token_texts) else ""

    def generate(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
                 chat_template: bool = False) -> Iterator:
        """As `SpeculativeDecoder.generate`: typed errors for a bad prompt now, then the run's events."""
        return self._run("decode", prompt, live, control, chat_template)

    def race(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
             chat_template: bool = False) -> Iterator:
        """As `Race.generate`, with both lanes in the child."""
        return self._run("race", prompt, live, control, chat_template)

    def close(self, timeout_s: float = CLOSE_GRACE_S) -> None:
        """End the child (asking first, then terminating); safe to call twice.

        The child keeps nothing worth saving, so its grace is short: an interpreter that has imported torch
        takes seconds to tear itself down, a terminated one ends at once (and frees all its memory)."""
        self._child.close(timeout_s)

    # -- loading
    def _await_load(self, progress: Callable[[float, str], None], cancelled: Callable[[], bool]) -> ModelsSummary:
        while True:
            if cancelled():
                raise EngineProcessError("loading was cancelled")
            match self._receive(POLL_S):
                case LoadProgress(fraction, message):
                    progress(fraction, message)
                case ModelsLoaded(summary, token_texts):
                    self._token_texts = token_texts
                    return summary
                case LoadFailed(error):
                    raise _typed_error(error)

    # -- running
    def _run(self, kind: RunKind, prompt: str, live, control, chat_template: bool) -> Iterator:
        live = LiveSettings(live) if isinstance(live, DecodeSettings) else live
        control = control or GenerationControl()
        if not self._lock.acquire(blocking=False):
            raise EngineProcessError("the engine is already running a generation: stop it first")
        link = _RunLink(self, live, control)
        try:
            link.start(kind, prompt, chat_template)
            match link.next_message():
                case RunRaised(error):
                    raise _typed_error(error)
        except BaseException:
            link.close()
            self._lock.release()
            raise
        return _Stream(self, link)

    def _abandon(self, link: _RunLink) -> None:
        """The caller stopped reading mid-run: stop the child's run and drop what it still sends."""
        try:
            link.control.stop()  # pushed to the child by the link
            waited = 0.0
            while waited < DRAIN_S:
                message = self._receive(POLL_S)
                waited += POLL_S
                if isinstance(message, RunDone | RunRaised):
                    return
        except EngineProcessError:
            return
        self.close()  # a child that does not stop cannot be trusted with the next run

    def _send(self, message: ToChild) -> None:
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError):  # a closed pipe, or a child that is gone
            raise self._gone() from None

    def _receive(self, timeout_s: float) -> ToParent | None:
        """The next message, None after `timeout_s` of silence; EngineProcessError if the child is gone."""
        try:
            if self._conn.poll(timeout_s):
                return self._conn.recv()
        except (EOFError, OSError, ValueError):
            raise self._gone() from None
        if not self._process.is_alive():
            raise self._gone()
        return None

    def _gone(self) -> EngineProcessError:
        if self._process.is_alive():  # it hung up on us: make sure it is really over
            self.close()
        self._process.join(1.0)
        return EngineProcessError(
            f"the engine process stopped unexpectedly (exit code {self._process.exitcode}) and its models with it. "
            "Load the models again to continue (in the window, Generate does that).")


class _Stream:
    """The events of one run. Closing it (or dropping it) before the end stops the run in the child."""

    def __init__(self, engine: EngineProcess, link: _RunLink) -> None:
        self._engine, self._link, self._open = engine, link, True

    def __iter__(self) -> _Stream:
        return self

    def __next__(self):
        if not self._open:
            raise StopIteration
        try:
            message = self._link.next_message()
        except BaseException:
            self._finish()
            raise
        match message:
            case RunEvent(event):
                return event
            case RunRaised(error):
                self._finish()
                raise _typed_error(error)
        self._finish()
        raise StopIteration  # RunDone

    def close(self) -> None:
        if self._open:
            try:
                self._engine._abandon(self._link)  # noqa: SLF001 - the stream is part of the engine
            finally:
                self._finish()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001, S110 - nothing can be reported from a finaliser
            pass

    def _finish(self) -> None:
        if self._open:
            self._open = False
            self._link.close()
            self._engine._lock.release()  # noqa: SLF001


class _RunLink:
    """One run's link: starts it in the child, then pushes the caller's settings and control there whenever they
    change, on the thread that changed them."""

    def __init__(self, engine: EngineProcess, live: LiveSettings, control: GenerationControl) -> None:
        self.engine, self.live, self.control = engine, live, control
        self._lock = threading.RLock()  # a change pushed while the run starts waits for its StartRun
        self._settings: DecodeSettings | None = None  # what the child has; None until the run starts
        self._requests: ControlRequests | None = None
        self._unwatch = (live.watch(self._on_change), control.watch(self._on_change))

    def start(self, kind: RunKind, prompt: str, chat_template: bool) -> None:
        with self._lock:
            self._settings, self._requests = self.live.get(), self.control.requests()
            self.engine._send(StartRun(kind, prompt, self._settings, chat_template, self._requests))  # noqa: SLF001

    def forward_changes(self) -> None:
        """Send the child what changed since it last heard (nothing before the run started)."""
        with self._lock:
            if self._settings is None:
                return
            settings, requests = self.live.get(), self.control.requests()
            if settings is not self._settings:
                self._settings = settings
                self.engine._send(LiveChange(settings))  # noqa: SLF001 - the link is part of the engine
            if requests != self._requests:
                self._requests = requests
                self.engine._send(ControlChange(requests))  # noqa: SLF001

    def _on_change(self) -> None:
        try:
            self.forward_changes()
        except EngineProcessError:
            pass  # the child is gone: the run's reader finds out at its next look, and says so there

    def next_message(self) -> ToParent:
        while True:
            message = self.engine._receive(POLL_S)  # noqa: SLF001
            if message is not None:
                return message

    def close(self) -> None:
        for unwatch in self._unwatch:
            unwatch()


def _typed_error(error: ErrorReport) -> Exception:
    cls = _TYPED_ERRORS.get(error.error_type)
    return cls(error.message) if cls is not None else EngineProcessError(f"{error.error_type}: {error.message}")


# --- child side -----------------------------------------------------------------------------------------------
def serve(conn, threads: int | None) -> None:
    """The child's main: import, wait for the models to load, load, report, then run what the parent asks
    until it closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in a terminal is the window's to handle
    import torch
    from transformers.utils import logging as hf_logging

    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.hf_compat import import_ahead
    from app.engine.loading import load_models

    # What loading any model imports (PreTrainedModel, generation, masking, losses; fast tokenizers): imported
    # here, while the window starts and before it has said which models, instead of after.
    import_ahead()

    hf_logging.disable_progress_bar()  # the window shows load progress; the terminal need not
    torch.set_num_threads(threads or _threads_beside_a_window())
    request = _await_request(conn)
    if request is None:
        return  # closed (or the parent is gone) before it asked for models
    try:
        models = load_models(**request.to_dict(),
                             progress=lambda fraction, message: conn.send(LoadProgress(fraction, message)))
        decoder = SpeculativeDecoder(models)
    except Exception as error:  # noqa: BLE001 - every failure goes to the parent as a typed message
        conn.send(LoadFailed(ErrorReport.of(error)))
        return
    conn.send(ModelsLoaded(ModelsSummary.of(models), token_texts(models.tokenizer)))
    _Host(conn, models, decoder).serve()


def _await_request(conn) -> LoadRequest | None:
    """The models to load; None if the parent closes first or is gone."""
    try:
        message = conn.recv()
    except (EOFError, OSError):
        return None
    return message.request if isinstance(message, LoadModels) else None


def token_texts(tokenizer: PreTrainedTokenizerBase) -> tuple[str, ...]:
    """Every token id's text, decoded on its own: how the window's process spells tokens without a tokenizer."""
    return tuple(tokenizer.batch_decode([[token_id] for token_id in range(len(tokenizer))]))


def _threads_beside_a_window() -> int:
    """CPU threads for the engine: all cores but one, which the window keeps."""
    import torch

    return max(1, min(torch.get_num_threads(), (os.cpu_count() or 2) - 1))


class _Host:
    """Child side: a reader thread applies live changes at once; runs execute on the main thread."""

    def __init__(self, conn, models, decoder) -> None:
        self._conn, self._models, self._decoder = conn, models, decoder
        self._jobs: queue.Queue = queue.Queue()
        self._live = LiveSettings()
        self._control = GenerationControl()

    def serve(self) -> None:
        threading.Thread(target=self._read, name="engine-inbox", daemon=True).start()
        while (job := self._jobs.get()) is not None:
            self._execute(*job)

    def _read(self) -> None:
        try:
            while not isinstance(message := self._conn.recv(), CloseEngine):
                match message:
                    case StartRun(kind, prompt, settings, chat_template, requests):
                        # Made here, not on the main thread, so the messages that follow reach this run's objects.
                        self._live, self._control = LiveSettings(settings), GenerationControl()
                        self._control.follow(requests)
                        self._jobs.put((kind, prompt, self._live, self._control, chat_template))
                    case LiveChange(settings):
                        self._live.set(settings)
                    case ControlChange(requests):
                        self._control.follow(requests)
        except (EOFError, OSError):
            pass  # the parent is gone
        self._control.stop()
        self._jobs.put(None)

    def _execute(self, kind: RunKind, prompt: str, live: LiveSettings, control: GenerationControl,
                 chat_template: bool) -> None:
        try:
            runner = self._decoder if kind == "decode" else _race(self._models)
            events = runner.generate(prompt, live, control, chat_template=chat_template)
            self._conn.send(RunStarted())
            for event in events:
                self._conn.send(RunEvent(event))
            self._conn.send(RunDone())
        except (EOFError, OSError, BrokenPipeError):
            self._jobs.put(None)
        except Exception as error:  # noqa: BLE001 - reaches the parent as the same typed error
            self._conn.send(RunRaised(ErrorReport.of(error)))


def _race(models):
    from app.engine.race import Race

    return Race(models)
