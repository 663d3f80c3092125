"""Small helpers shared by the window tests."""

from __future__ import annotations

import threading

from PySide6.QtCore import QCoreApplication
from PySide6.QtGui import QTextCursor

from app.widgets.token_view import block_outcomes

RUN_MS = 30_000


def hold_compiles(monkeypatch) -> tuple[threading.Event, list[int]]:
    """Compiled steps that run eagerly but wait, at each call, until the returned event is set (RUN_MS at most);
    the list collects each call's number of rows. For loads held inside a compile warm-up step."""
    from app.engine.runtime import cached_model

    gate = threading.Event()
    calls: list[int] = []

    def compile_step(step, device):
        def compiled(*args, **kwargs):
            calls.append(args[0].shape[-1])
            gate.wait(RUN_MS / 1000)
            return step(*args, **kwargs)
        return compiled

    monkeypatch.setattr(cached_model, "compile_step", compile_step)
    return gate, calls


def deliver_queued_signals() -> None:
    """Deliver what other threads have queued for the GUI thread so far (a finished thread queues no more)."""
    QCoreApplication.sendPostedEvents()
    QCoreApplication.processEvents()


def run_to_end(qtbot, window, timeout: int = RUN_MS) -> None:
    """Start a generation and wait until its thread has ended and been joined."""
    with qtbot.waitSignal(window.sig_run_finished, timeout=timeout):
        assert window.start_generation()


def wait_for_passes(qtbot, window, count: int, timeout: int = RUN_MS) -> None:
    qtbot.waitUntil(lambda: len(window.session.passes) >= count, timeout=timeout)


def fragment_outcomes(view) -> set[str]:
    """Outcome names carried by the character formats of every text fragment of the view."""
    found: set[str] = set()
    block = view.document().begin()
    while block.isValid():
        found.update(block_outcomes(block))
        block = block.next()
    return found


def format_at(view, position: int):
    cursor = QTextCursor(view.document())
    cursor.setPosition(position + 1)  # charFormat() is the format of the character before the cursor
    return cursor.charFormat()
