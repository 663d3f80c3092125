"""Presentation mode: one large token stream and one large chart at a time, for a projector.

High contrast (black text on white, or the reverse in a dark theme), the stream's
text at the theme's `stream_px` (at least 20 px) and the chart's at its
`chart_px` (at least 16 px), and driven from the keyboard (`KEYS`): the main
window owns the actions, this page only shows. The stream sits beside the chart
on a wide window and above it on a narrow one, so nothing is clipped from
1024x768 to 1920x1080.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QBoxLayout, QLabel, QVBoxLayout, QWidget

from app.widgets.charts import RunCharts
from app.widgets.theme import Theme, current_theme
from app.widgets.token_view import TokenView

SIDE_BY_SIDE_PX = 1300  # wider than this: stream and chart beside each other; else one above the other
TEXT_ONLY = 0  # the view that shows the stream alone
# What each key does in presentation mode (the Help menu and the hint line list it).
KEYS = (
    ("Space", "run the next pass (starts a paused run)"),
    ("← / →", "previous / next pass, highlighted in the text"),
    ("1 – 5", "show one chart: α, tokens per pass, ASD ledger, tokens/s, speedup"),
    ("0", "the text alone"),
    ("R", "one pass per line, or the flowing text"),
    ("Page Up / Page Down", "previous / next view"),
    ("F11 or Esc", "leave presentation mode"),
)
HINT = "Space next pass · ←/→ pass · 1-5 chart · 0 text only · R one pass per line · F11 leave"


class PresentationPage(QWidget):
    """The stream and one chart, large; `show_view` picks the chart (0 = the text alone)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("presentationPage")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)  # its style sheet's background is drawn
        self.title = QLabel()
        self.title.setObjectName("presentationTitle")
        self.title.setWordWrap(True)
        self.stream = TokenView()
        self.stream.setObjectName("presentationStream")
        self.stream.installEventFilter(self)  # its keys are the window's shortcuts here
        self.charts = RunCharts()
        self.charts.setObjectName("presentationCharts")
        # No ASD budget, Compare or Clear charts under the chart: the ASD ledger chart shows the budget, and pinning
        # and clearing are done between runs in the normal layout (pinned runs are drawn here too); the chart
        # gets the height, and nothing small is left on the projector.
        self.charts.controls_bar.hide()
        self.hint = QLabel(HINT)
        self.hint.setObjectName("presentationHint")
        self.hint.setWordWrap(True)
        self.view = TEXT_ONLY
        self._body = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self._body.addWidget(self.stream, 1)
        self._body.addWidget(self.charts, 1)
        column = QVBoxLayout(self)
        column.addWidget(self.title)
        column.addLayout(self._body, 1)
        column.addWidget(self.hint)
        self.apply_theme(current_theme())
        self.show_view(TEXT_ONLY)

    def set_session(self, session) -> None:
        self.stream.set_session(session)
        self.charts.set_session(session)

    @property
    def view_count(self) -> int:
        return len(self.charts.plot_titles()) + 1

    def show_view(self, view: int) -> None:
        """0: the text alone; 1..5: the text and that chart."""
        self.view = max(0, min(view, self.view_count - 1))
        self.charts.setVisible(self.view != TEXT_ONLY)
        if self.view != TEXT_ONLY:
            self.charts.focus_plot(self.view - 1)
        name = "the text" if self.view == TEXT_ONLY else self.charts.plot_titles()[self.view - 1]
        self.title.setText(f"View {self.view}: {name}")

    def step_view(self, delta: int) -> None:
        self.show_view((self.view + delta) % self.view_count)

    def apply_theme(self, theme: Theme) -> None:
        """High contrast and large text: the stream at `stream_px`, the charts follow the theme themselves."""
        self.setStyleSheet(
            f"#presentationPage, #presentationStream {{ background: {theme.background}; color: {theme.text}; }}"
            f"#presentationTitle {{ color: {theme.text}; font-size: {theme.title_px}px; font-weight: bold; }}"
            f"#presentationHint {{ color: {theme.text}; font-size: {max(14, theme.chart_px - 2)}px; }}")
        self.stream.set_text_px(max(20, theme.stream_px))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        wide = self.width() > SIDE_BY_SIDE_PX
        direction = QBoxLayout.Direction.LeftToRight if wide else QBoxLayout.Direction.TopToBottom
        if self._body.direction() != direction:
            self._body.setDirection(direction)

    def eventFilter(self, watched, event) -> bool:
        """The read-only stream would claim plain keys (digits, R, Space) for itself before the window's
        shortcuts see them: it gets none of them here."""
        if watched is self.stream and event.type() == QEvent.Type.ShortcutOverride:
            plain = event.modifiers() in (Qt.KeyboardModifier.NoModifier, Qt.KeyboardModifier.KeypadModifier)
            if plain:
                return True
        return super().eventFilter(watched, event)

    def focus_stream(self) -> None:
        self.stream.setFocus(Qt.FocusReason.OtherFocusReason)
