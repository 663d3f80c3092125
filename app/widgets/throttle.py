"""Redraw at most once per interval: painting plots costs far more than the data that feeds them."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

# Redrawing plots costs far more than appending tokens (axes, paths, Python paint code on the GUI thread),
# so the charts and the theory explorer redraw at most this often, even though the session ticks at ~30 Hz.
MIN_REDRAW_MS = 250


class RedrawThrottle(QObject):
    """Calls `draw` at once when the last draw is at least `interval_ms` old, else once when it will be.

    The widget tells the throttle when it drew (`drawn`), also when it drew for another reason, so
    a requested draw never follows a fresh one too closely.
    """

    def __init__(self, interval_ms: int, draw: Callable[[], None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.interval_ms = interval_ms
        self._draw = draw
        self._drawn_at = 0.0
        self._pending = QTimer(self)
        self._pending.setSingleShot(True)
        self._pending.timeout.connect(draw)

    @property
    def pending(self) -> bool:
        return self._pending.isActive()

    def request(self) -> None:
        """Draw now if the interval has passed, else once it has; a draw already pending covers this one."""
        if self.pending:
            return
        wait_ms = self.interval_ms - 1000 * (time.monotonic() - self._drawn_at)
        if wait_ms <= 0:
            self._draw()
        else:
            self._pending.start(int(wait_ms))

    def drawn(self) -> None:
        """The widget has just drawn: a pending draw is no longer needed, the next waits a full interval."""
        self._pending.stop()
        self._drawn_at = time.monotonic()

    def again_later(self) -> None:
        """Draw once more a full interval from now (work left over from this draw)."""
        self._pending.start(self.interval_ms)
