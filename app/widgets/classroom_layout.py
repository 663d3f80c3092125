"""The Classroom layout (View → Classroom layout): every font CLASSROOM_FONT_SCALE times larger, and the docks
arranged for a projector in front of a class.

    left column    the prompt, the drafters and the guide (and the lesson) tabbed together, as wide as the
                   drafter panel needs at the larger text (no label cut) but never more than SIDE_MAX_PERCENT
                   of the window
    centre         the token stream, with the rest of the width
    bottom         the charts across the whole window, all five in one row (RunCharts wraps their titles and
                   legends to their columns), as tall as that row needs: CHARTS_SHARE_PERCENT of the height at
                   least, CHARTS_MAX_PERCENT at most (in a smaller window they scroll, their plots in view);
                   the race, while its tab is in front, as tall as its panel needs within the same bounds

Leaving the layout puts the docks back as they were before it was entered.
"""

from __future__ import annotations

from collections.abc import Callable

import shiboken6
from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtGui import QFont, QFontInfo
from PySide6.QtWidgets import QApplication, QDockWidget, QMainWindow, QMenu, QTabBar, QWidget

from app.widgets import on_screen
from app.widgets.charts import RunCharts

CLASSROOM_FONT_SCALE = 1.5  # the Classroom layout's fonts, for a projector at the back of a room
PRESENTATION_MENU_SCALE = 1.6  # menus and the status bar read from the back of a room in presentation mode
PRESENTATION_STATUS_PX = 20  # the status bar's least text size in presentation mode (the stream's least size)
CHARTS_SHARE_PERCENT = 42  # of the window's height at least (the prompt keeps six lines at 1600x1000)
CHARTS_MAX_PERCENT = 55  # at most: the stream and the prompt keep the rest
CHARTS_SCROLL_PERCENT = 36  # at least, in a window too small for the row (1024x768): the charts scroll
SIDE_MAX_PERCENT = 40  # the left column never takes more of the width (the stream keeps the most of it)
KEEP_MARGIN_PX = 8  # under the button kept in view
SEPARATOR_PX = 6  # between the left column and the charts
SIDE_FRAME_PX = 30  # a side dock's frame and its scroll area's vertical bar


def classroom_font(scale: float) -> QFont:
    """The application's font, `scale` times larger."""
    font = QFont(QApplication.font())
    font.setPointSizeF(font.pointSizeF() * scale)
    return font


def size_window_text(window: QMainWindow, presenting: bool) -> None:
    """The menu bar, its menus and the status bar at the window's text size, larger still in presentation mode
    (a menu is a window of its own: it does not inherit the window's font)."""
    font = QFont(window.font())
    if presenting:
        font.setPointSizeF(QApplication.font().pointSizeF() * PRESENTATION_MENU_SCALE)
    window.menuBar().setFont(font)
    for menu in window.menuBar().findChildren(QMenu):
        menu.setFont(font)
    if presenting:  # as large as the stream's least size there, so the class can read the figures
        font.setPixelSize(max(PRESENTATION_STATUS_PX, QFontInfo(font).pixelSize()))
    window.statusBar().setFont(font)


class ClassroomDocks:
    """Rearranges a window's docks for the Classroom layout and back.

    `side` are the docks tabbed into the left column, the first of them in front; `panels` the widgets whose
    size hint sets the column's width."""

    def __init__(self, window: QMainWindow, side: list[QDockWidget], panels: list, charts: QDockWidget,
                 view: RunCharts, restore: Callable[[QByteArray], object], keep: QWidget,
                 tall: dict[QDockWidget, QWidget] | None = None) -> None:
        """`charts` holds `view`, whose `height_to_fit` sets the bottom row's height; `tall` are other docks of the
        bottom row whose panel's minimum height sets it while they are in front (the race); `keep` (in the first
        side dock's panel: the Generate button) stays in view above them."""
        self._window = window
        self._view = view
        self._keep = keep
        self._tall = dict(tall or {})
        self._restore = restore  # the window's restoreState (which also retires the tab bars it replaced)
        self._side = side
        self._panels = panels
        self._charts = charts
        self._before: QByteArray | None = None  # the docks as they were before the layout (None: not in it)
        self._resize_due = False
        self._keep_room: int | None = None  # what _room_below_keep measured when `keep` last showed
        view.sig_text_resized.connect(self._need_changed)
        for dock in (charts, *self._tall):
            dock.visibilityChanged.connect(self._need_changed)  # a tab raised: the row fits what it shows

    @property
    def on(self) -> bool:
        return self._before is not None

    @property
    def state_before(self) -> QByteArray | None:
        """The docks as they were before the Classroom layout (what is saved for the next start)."""
        return self._before

    def follow(self, on: bool) -> None:
        """Enter the layout (on) or leave it (off), unless already there."""
        if on and not self.on:
            self.enter()
        elif not on and self.on:
            self.leave()

    def enter(self) -> None:
        """Tab the side docks into the left column, remembering where they were."""
        if self._before is None:
            self._before = self._window.saveState()
        self.arrange()

    def forget(self) -> None:
        """Leave the layout without putting the docks back (the window's layout was reset)."""
        self._before = None

    def arrange(self) -> None:
        window, first = self._window, self._side[0]
        layout = window.layout()
        if layout is not None:
            layout.activate()  # laid out before the first tab (see MainWindow._tabify)
        for dock in self._side:
            dock.setFloating(False)
        window.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, first)
        for dock in self._side[1:]:
            visible = dock.isVisibleTo(window)
            window.tabifyDockWidget(first, dock)
            dock.setVisible(visible)
        first.show()
        first.raise_()
        self.size_docks()

    def leave(self) -> None:
        """The docks back where they were before the Classroom layout."""
        before, self._before = self._before, None
        if before is not None:
            self._restore(before)

    def side_width(self) -> int:
        """The left column: as wide as its widest panel asks at the current text size, within SIDE_MAX_PERCENT."""
        wanted = max(panel.sizeHint().width() for panel in self._panels) + SIDE_FRAME_PX
        return min(wanted, self._window.width() * SIDE_MAX_PERCENT // 100)

    def _front(self) -> QDockWidget:
        """The bottom row's dock in front: a tall one when it shows, else the charts."""
        return next((dock for dock in self._tall if on_screen(dock)), self._charts)

    def charts_height(self) -> int:
        """What the bottom row's dock in front needs (the charts: all in one row), if that is within
        CHARTS_MAX_PERCENT of the window and leaves `keep` in view, and CHARTS_SHARE_PERCENT at least; a window
        too small for it: all the room up to those bounds (CHARTS_SCROLL_PERCENT at least), and it scrolls."""
        dock, height = self._front(), self._window.height()
        inner = self._view.height_to_fit() if dock is self._charts else self._tall[dock].minimumSizeHint().height()
        panel = self._view if dock is self._charts else dock.widget()
        need = inner + dock.height() - panel.height() + self._tab_bar_height(dock)
        most = min(height * CHARTS_MAX_PERCENT // 100, self._room_below_keep())
        if need > most:  # it scrolls: as much room as there is, the plots in view before their legends
            return max(height * CHARTS_SCROLL_PERCENT // 100, most)
        return max(height * CHARTS_SHARE_PERCENT // 100, need)

    def _need_changed(self, *_args) -> None:
        """A legend grew or shrank, or another tab came to the front: the row is sized again, once per burst."""
        if self.on and not self._resize_due:
            self._resize_due = True
            QTimer.singleShot(0, self._resize_bottom)

    def _resize_bottom(self) -> None:
        self._resize_due = False
        if not all(shiboken6.isValid(w) for w in (self._window, self._charts, *self._tall, *self._side)):
            return  # the window was closed while the resize waited
        dock = self._front()
        if self.on and not dock.isFloating():
            self._window.resizeDocks([dock], [self.charts_height()], Qt.Orientation.Vertical)

    def _room_below_keep(self) -> int:
        """The most the charts (with their tab bar) can take with `keep` still in view in the left column; while
        another tab of the column is in front, what it was when `keep` last showed (its place is not laid out)."""
        if not on_screen(self._keep):
            return self._keep_room if self._keep_room is not None else 0
        first = self._side[0]
        panel = first.widget()
        bottom = self._keep.mapTo(panel, self._keep.rect().bottomLeft()).y() + KEEP_MARGIN_PX
        column = first.height() - panel.height() + bottom + self._tab_bar_height(first)
        front = self._front()
        area = front.geometry().bottom() + self._tab_bar_height(front) - first.geometry().top()
        self._keep_room = area - column - SEPARATOR_PX
        return self._keep_room

    def _tab_bar_height(self, dock: QDockWidget) -> int:
        """The height of the tab bar under `dock`'s tabbed group (resizeDocks sizes the group with its bar)."""
        for bar in self._window.findChildren(QTabBar, options=Qt.FindChildOption.FindDirectChildrenOnly):
            if bar.isVisible() and dock.windowTitle() in {bar.tabText(i) for i in range(bar.count())}:
                return bar.height()
        return 0

    def size_docks(self) -> None:
        window = self._window
        window.resizeDocks([self._side[0]], [self.side_width()], Qt.Orientation.Horizontal)
        self._resize_bottom()
