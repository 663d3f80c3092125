"""Small helpers shared by the window tests."""

from __future__ import annotations

from PySide6.QtGui import QTextCursor

from app.widgets import token_style as ts

RUN_MS = 30_000


def run_to_end(qtbot, window, timeout: int = RUN_MS) -> None:
    """Start a generation and wait until its thread has ended and been joined."""
    with qtbot.waitSignal(window.sig_run_finished, timeout=timeout):
        assert window.start_generation()


def wait_for_passes(qtbot, window, count: int, timeout: int = RUN_MS) -> None:
    qtbot.waitUntil(lambda: len(window.session.passes) >= count, timeout=timeout)


def fragment_outcomes(view) -> set[str]:
    """Outcome names carried by the character formats of every text fragment of the view."""
    found = set()
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.isValid():
                name = ts.outcome_of(fragment.charFormat())
                if name:
                    found.add(name)
            it += 1
        block = block.next()
    return found


def format_at(view, position: int):
    cursor = QTextCursor(view.document())
    cursor.setPosition(position + 1)  # charFormat() is the format of the character before the cursor
    return cursor.charFormat()
