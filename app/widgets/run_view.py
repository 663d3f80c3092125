"""What the widgets read of a run: the view-model (`app.session.Session`) as the widgets' `set_session` types it.

A widget depends on these members only, so a test may hand it any object that has them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import SignalInstance

if TYPE_CHECKING:
    from app.engine.events import PassEvent, RunningStats, StartEvent
    from app.session import DrafterSeries, GrowingColumns, SettingChange


class RunView(Protocol):
    """A run's history and its signals: `sig_refresh` (redraw now), `sig_begun` (a new run's history begins),
    `sig_started(StartEvent)`, `sig_ended(EndEvent)`."""

    @property
    def sig_refresh(self) -> SignalInstance: ...
    @property
    def sig_begun(self) -> SignalInstance: ...
    @property
    def sig_started(self) -> SignalInstance: ...
    @property
    def sig_ended(self) -> SignalInstance: ...

    @property
    def passes(self) -> list[PassEvent]: ...
    @property
    def start(self) -> StartEvent | None: ...
    @property
    def changes(self) -> list[SettingChange]: ...
    @property
    def series(self) -> GrowingColumns: ...
    @property
    def by_drafter(self) -> dict[str, DrafterSeries]: ...
    @property
    def stats(self) -> RunningStats | None: ...
    @property
    def k_setting(self) -> int | None: ...

    def position_rates(self) -> list[float | None]: ...


def bound(session: RunView | None) -> RunView:
    """The session a widget was given with `set_session` (it draws nothing before that)."""
    if session is None:
        raise RuntimeError("the widget has no session yet: call set_session first")
    return session
