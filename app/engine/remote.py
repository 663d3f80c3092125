"""The engine in a process of its own, driven like an in-process decoder.

Python runs one thread at a time per process: a window drawing charts in the
same process as the decoder takes its turns away from the decoder's Python.
`EngineProcess` loads the models in a child process and streams the same
event objects back through a pipe, so the window and the engine each keep a
CPU core to themselves.

    engine = EngineProcess(dict(target=None, draft=None))   # loads in the child; raises ModelLoadError ...
    for event in engine.generate(prompt, live, control):     # the Engine contract (app/engine/engine.py)
        ...
    for event in engine.race(prompt, settings):               # both lanes run in the child
        ...
    engine.close()

While a run streams, the caller's `LiveSettings` and `GenerationControl` are
watched and every change is forwarded, so live toggles, pause, step and stop
behave as they do in process. One run at a time.

Most of a child's start-up is importing torch and transformers, before it
needs to know which models to load. `EngineProcessStarter` starts a child
ahead, as the very first thing the app does (where a core is free for it),
and hands it the models to load when the window asks for them:

    engines = EngineProcessStarter()           # with more than two cores, the child starts importing now
    ...                                        # meanwhile: Qt, the window, the saved settings
    engine = engines(request, progress, cancelled)   # an EngineFactory: that child loads `request`

Messages, parent -> child: ("load", request), ("run", kind, prompt, settings, chat_template, requests),
("live", settings), ("control", requests), ("close",). Child -> parent: ("progress", fraction, message),
("loaded", summary, token_texts), ("failed", error_type, message), ("started",), ("event", event), ("done",),
("raised", error_type, message).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from app.engine import errors
from app.engine.engine import ModelsSummary
from app.engine.settings import ControlRequests, DecodeSettings, GenerationControl, LiveSettings, SettingsError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

POLL_S = 0.02  # how often a waiting parent looks at the caller's settings and control
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
    caller goes on, then loads the models of the ("load", request) message it is sent (`EngineProcess` sends
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
                self.conn.send(("close",))
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

    def __call__(self, request: dict, progress: Callable[[float, str], None] | None = None,
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

    def __init__(self, request: dict, progress: Callable[[float, str], None] | None = None,
                 cancelled: Callable[[], bool] = lambda: False, threads: int | None = None,
                 child: EngineChild | None = None) -> None:
        """Start a child (or take `child`, one started ahead) and wait until it has loaded `request`
        (load_models' arguments). `threads` is the new child's; a child started ahead has its own.

        Raises the loader's typed error (ModelLoadError, OutOfMemoryError ...) or EngineProcessError;
        the child is gone then. `cancelled()` is polled while waiting: True ends the child at once.
        """
        self._child = child if child is not None else EngineChild(threads)
        self._conn, self._process = self._child.conn, self._child.process
        self._lock = threading.Lock()  # one run at a time
        self._token_texts: tuple[str, ...] = ()
        try:
            self._send(("load", dict(request)))
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
            message = self._receive(POLL_S)
            if message is None:
                continue
            kind = message[0]
            if kind == "progress":
                progress(message[1], message[2])
            elif kind == "loaded":
                self._token_texts = message[2]
                return message[1]
            elif kind == "failed":
                raise _typed_error(message[1], message[2])

    # -- running
    def _run(self, kind: str, prompt: str, live, control, chat_template: bool) -> Iterator:
        live = LiveSettings(live) if isinstance(live, DecodeSettings) else live
        control = control or GenerationControl()
        if not self._lock.acquire(blocking=False):
            raise EngineProcessError("the engine is already running a generation: stop it first")
        try:
            link = _RunLink(self, live, control)
            self._send(("run", kind, prompt, link.settings, chat_template, link.requests))
            first = link.next_message()
            if first[0] == "raised":
                raise _typed_error(first[1], first[2])
        except BaseException:
            self._lock.release()
            raise
        return _Stream(self, link)

    def _abandon(self, link: _RunLink) -> None:
        """The caller stopped reading mid-run: stop the child's run and drop what it still sends."""
        try:
            link.control.stop()
            link.forward_changes()
            waited = 0.0
            while waited < DRAIN_S:
                message = self._receive(POLL_S)
                waited += POLL_S
                if message is not None and message[0] in ("done", "raised"):
                    return
        except EngineProcessError:
            return
        self.close()  # a child that does not stop cannot be trusted with the next run

    def _send(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError):  # a closed pipe, or a child that is gone
            raise self._gone() from None

    def _receive(self, timeout_s: float):
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
        if message[0] == "event":
            return message[1]
        self._finish()
        if message[0] == "raised":
            raise _typed_error(message[1], message[2])
        raise StopIteration  # "done"

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
            self._engine._lock.release()  # noqa: SLF001


class _RunLink:
    """One run's link: forwards the caller's settings and control to the child as they change."""

    def __init__(self, engine: EngineProcess, live: LiveSettings, control: GenerationControl) -> None:
        self.engine, self.live, self.control = engine, live, control
        self.settings: DecodeSettings = live.get()
        self.requests: ControlRequests = control.requests()

    def forward_changes(self) -> None:
        settings, requests = self.live.get(), self.control.requests()
        if settings is not self.settings:
            self.settings = settings
            self.engine._send(("live", settings))  # noqa: SLF001 - the link is part of the engine
        if requests != self.requests:
            self.requests = requests
            self.engine._send(("control", requests))  # noqa: SLF001

    def next_message(self):
        while True:
            self.forward_changes()
            message = self.engine._receive(POLL_S)  # noqa: SLF001
            if message is not None:
                return message


def _typed_error(error_type: str, message: str) -> Exception:
    cls = _TYPED_ERRORS.get(error_type)
    return cls(message) if cls is not None else EngineProcessError(f"{error_type}: {message}")


# --- child side -----------------------------------------------------------------------------------------------
def serve(conn, threads: int | None) -> None:
    """The child's main: import, wait for the models to load, load, report, then run what the parent asks
    until it closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in a terminal is the window's to handle
    import torch

    # What loading any model imports (PreTrainedModel, generation, masking, losses; fast tokenizers): imported
    # here, while the window starts and before it has said which models, instead of after.
    import transformers.modeling_layers
    import transformers.tokenization_utils_tokenizers  # noqa: F401
    from transformers.utils import logging as hf_logging

    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models

    hf_logging.disable_progress_bar()  # the window shows load progress; the terminal need not
    torch.set_num_threads(threads or _threads_beside_a_window())
    request = _await_request(conn)
    if request is None:
        return  # closed (or the parent is gone) before it asked for models
    try:
        models = load_models(**request, progress=lambda fraction, message: conn.send(("progress", fraction, message)))
        decoder = SpeculativeDecoder(models)
    except Exception as error:  # noqa: BLE001 - every failure goes to the parent as a typed message
        conn.send(("failed", type(error).__name__, str(error) or type(error).__name__))
        return
    conn.send(("loaded", ModelsSummary.of(models), token_texts(models.tokenizer)))
    _Host(conn, models, decoder).serve()


def _await_request(conn) -> dict | None:
    """The models to load (load_models' arguments); None if the parent closes first or is gone."""
    try:
        message = conn.recv()
    except (EOFError, OSError):
        return None
    return message[1] if message[0] == "load" else None


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
            while True:
                message = self._conn.recv()
                kind = message[0]
                if kind == "run":
                    _, run_kind, prompt, settings, chat_template, requests = message
                    # Made here, not on the main thread, so the messages that follow reach this run's objects.
                    self._live, self._control = LiveSettings(settings), GenerationControl()
                    self._control.follow(requests)
                    self._jobs.put((run_kind, prompt, self._live, self._control, chat_template))
                elif kind == "live":
                    self._live.set(message[1])
                elif kind == "control":
                    self._control.follow(message[1])
                elif kind == "close":
                    break
        except (EOFError, OSError):
            pass  # the parent is gone
        self._control.stop()
        self._jobs.put(None)

    def _execute(self, kind: str, prompt: str, live: LiveSettings, control: GenerationControl,
                 chat_template: bool) -> None:
        try:
            runner = self._decoder if kind == "decode" else _race(self._models)
            events = runner.generate(prompt, live, control, chat_template=chat_template)
            self._conn.send(("started",))
            for event in events:
                self._conn.send(("event", event))
            self._conn.send(("done",))
        except (EOFError, OSError, BrokenPipeError):
            self._jobs.put(None)
        except Exception as error:  # noqa: BLE001 - reaches the parent as the same typed error
            self._conn.send(("raised", type(error).__name__, str(error) or type(error).__name__))


def _race(models):
    from app.engine.race import Race

    return Race(models)
