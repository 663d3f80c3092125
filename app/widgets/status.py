"""Status bar: what is loaded (device, dtype, models), how a load goes (its step, a bar, Cancel) and how the
run goes (tokens/s, alpha, passes).

alpha = accepted / (accepted + passes that ended in a rejection) and the acceptance rate = accepted /
drafted are the engine's (app/engine/core/stats.py, docs/ALGORITHMS.md §7.1-§7.2).

Nothing here widens the window: every text shrinks with "…" (its full text in the tooltip) when the bar is
short of room, the message first, then the models and the device, the figures of the run last.
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import (
    QLabel,
    QProgressBar,
    QStatusBar,
    QStyle,
    QStyleOption,
    QToolButton,
    QWidget,
)

from app.engine.engine import ModelsSummary
from app.engine.events import ExecutionMode
from app.engine.runtime.execution import mode_label

EXECUTION_TIP = ("How the models run: a dynamic KV cache grows and is cropped; a static one is preallocated and "
                 "rolled back by moving its write position;\ncompiled: the short forwards run through torch.compile "
                 "(CUDA graphs on a GPU). Chosen when loading (File → Load models…, --cache, --compile).")


# A step count in a progress message ("(4/16)", "3/14,"): never a model's folder, whatever the disk holds.
STEP_COUNT = re.compile(r"\(?\d+/\d+\)?[,.:;]?")

SPACING = 10  # between two items of the bar
MESSAGE_GAP = 20  # between the message and the first item after it
COMFORTABLE_CHARS = 24  # every text gets this many characters' width before any gets more


class ElidedLabel(QLabel):
    """A one-line label that takes less room than its text when it must, and ends (or cuts the middle of) what
    does not fit with "…". Its tooltip holds the full text while it is cut, with the label's own explanation."""

    def __init__(self, text: str = "", elide: Qt.TextElideMode = Qt.TextElideMode.ElideRight, keep: int = 3,
                 parent=None) -> None:
        super().__init__(text, parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self._elide = elide
        self._keep = keep  # characters still shown at the narrowest
        self._tip = ""
        self._tip_holds_text = False

    def setText(self, text: str) -> None:
        super().setText(text)
        self._sync_tip()

    def set_tip(self, tip: str, holds_text: bool = False) -> None:
        """The label's own tooltip; `holds_text`: it says all the text says, so a cut text adds nothing to it."""
        self._tip, self._tip_holds_text = tip, holds_text
        self._sync_tip()

    def elided(self) -> bool:
        return self.fontMetrics().horizontalAdvance(self.text()) > self._text_rect().width()

    def shown_text(self) -> str:
        """The text as painted: whole, or cut with "…"."""
        return self.fontMetrics().elidedText(self.text(), self._elide, max(self._text_rect().width(), 0))

    def minimumSizeHint(self) -> QSize:
        hint = super().sizeHint()
        text = self.text()
        if len(text) <= self._keep + 1:
            return hint
        narrow = text[:self._keep] + "…" if self._elide == Qt.TextElideMode.ElideRight \
            else text[:1] + "…" + text[len(text) - self._keep + 1:]
        extra = hint.width() - self.fontMetrics().horizontalAdvance(text)
        return QSize(min(hint.width(), self.fontMetrics().horizontalAdvance(narrow) + max(extra, 0)), hint.height())

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._sync_tip()

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        self.style().drawItemText(painter, self._text_rect(), int(self.alignment()), self.palette(), self.isEnabled(),
                                  self.shown_text(), self.foregroundRole())

    def _text_rect(self):
        margin = self.margin()
        return self.contentsRect().adjusted(margin, margin, -margin, -margin)

    def _sync_tip(self) -> None:
        cut = bool(self.text()) and self.elided() and not self._tip_holds_text
        self.setToolTip("\n".join(part for part in (self.text() if cut else "", self._tip) if part))


class StatusLine(QWidget):
    """The bar's content on one line: the message on the left, the other items on the right.

    Its minimum width is what the items need at their narrowest, never their texts' width. The room there is
    goes first to the items of `whole`, whole, then to every item up to a comfortable width, then to the items
    whole, each time in the order of `priority`; the message, last in it, is the first to be cut."""

    def __init__(self, message: QWidget, items: list[QWidget], priority: list[QWidget],
                 whole: tuple[QWidget, ...] = (), parent=None) -> None:
        super().__init__(parent)
        self.message = message
        self.items = items
        self.priority = [*priority, *(w for w in (message, *items) if w not in priority)]
        self.whole = whole
        for widget in (message, *items):
            widget.setParent(self)

    def _shown(self) -> list[QWidget]:
        return [w for w in (self.message, *self.items) if not w.isHidden() and _hint(w) > 0]

    def _spacing(self, shown: list[QWidget]) -> int:
        if not shown:
            return 0
        gaps = SPACING * (len(shown) - 1)
        if shown[0] is self.message and len(shown) > 1:
            gaps += MESSAGE_GAP - SPACING
        return gaps

    def sizeHint(self) -> QSize:
        shown = self._shown()
        return QSize(sum(_hint(w) for w in shown) + self._spacing(shown), self._height(shown, QWidget.sizeHint))

    def minimumSizeHint(self) -> QSize:
        shown = self._shown()
        return QSize(sum(_minimum(w) for w in shown) + self._spacing(shown),
                     self._height(shown, QWidget.minimumSizeHint))

    @staticmethod
    def _height(shown: list[QWidget], hint) -> int:
        return max((min(hint(w).height(), w.maximumHeight()) for w in shown), default=0)

    def widths(self, width: int) -> dict[QWidget, int]:
        """How wide each shown item is in a line `width` wide."""
        shown = self._shown()
        sizes = {w: _minimum(w) for w in shown}
        spare = width - sum(sizes.values()) - self._spacing(shown)
        comfortable = self.fontMetrics().averageCharWidth() * COMFORTABLE_CHARS
        rounds = (
            lambda w: _hint(w) if w in self.whole else 0,  # whole before anything else gets more
            lambda w: min(_hint(w), comfortable),
            _hint,
        )
        for goal in rounds:
            for widget in (w for w in self.priority if w in sizes):
                more = max(0, min(spare, goal(widget) - sizes[widget]))
                sizes[widget] += more
                spare -= more
        return sizes

    def relayout(self) -> None:
        """The items' texts or visibility changed: a new size hint, and the items placed now."""
        self.updateGeometry()
        self._arrange()

    def _arrange(self) -> None:
        shown = self._shown()
        sizes = self.widths(self.width())
        height = self.height()
        right = [w for w in shown if w is not self.message]
        x = self.width()
        for widget in reversed(right):
            x -= sizes[widget]
            self._place(widget, x, sizes[widget], height)
            x -= SPACING
        if self.message in sizes:
            room = x - (MESSAGE_GAP - SPACING) if right else self.width()
            self._place(self.message, 0, max(0, min(room, _hint(self.message))), height)

    @staticmethod
    def _place(widget: QWidget, x: int, width: int, height: int) -> None:
        tall = min(height, widget.maximumHeight(), max(widget.sizeHint().height(), 1)) \
            if not isinstance(widget, QLabel) else height
        widget.setGeometry(x, (height - tall) // 2, width, tall)

    def event(self, event) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # an item's text, size or visibility changed
            self.relayout()
            return True
        return super().event(event)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._arrange()


def _hint(widget: QWidget) -> int:
    return max(min(widget.sizeHint().width(), widget.maximumWidth()), _minimum(widget))


def _minimum(widget: QWidget) -> int:
    return widget.minimumWidth() or min(widget.minimumSizeHint().width(), widget.maximumWidth())


class RunStatusBar(QStatusBar):
    sig_cancel_load = Signal()  # the load progress's Cancel was clicked

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.message_label = ElidedLabel("")
        self.message_label.setObjectName("statusMessage")
        self.models_label = ElidedLabel("no models", Qt.TextElideMode.ElideMiddle, keep=6)
        self.device_label = ElidedLabel("")
        self._device = ""  # "cpu · float32": what the mode in use is shown after
        self.speed_label = ElidedLabel("")
        self.speed_label.setObjectName("tokensPerSecond")
        self.alpha_label = ElidedLabel("", keep=6)
        self.passes_label = ElidedLabel("", keep=6)
        self.load_label = ElidedLabel("", Qt.TextElideMode.ElideMiddle, keep=8)  # the step count stays
        self.load_label.setObjectName("loadProgressText")
        self.load_bar = QProgressBar()
        self.load_bar.setObjectName("loadProgress")
        self.load_bar.setFixedWidth(120)
        self.load_bar.setMaximumHeight(16)
        self.cancel_load_button = QToolButton()
        self.cancel_load_button.setObjectName("cancelLoad")
        self.cancel_load_button.setText("Cancel")
        self.cancel_load_button.setToolTip("Stop loading these models; the models in use stay")
        self.cancel_load_button.clicked.connect(self.sig_cancel_load)
        self._run_labels = (self.speed_label, self.alpha_label, self.passes_label)
        self.line = StatusLine(
            self.message_label,
            [self.load_label, self.load_bar, self.cancel_load_button, self.models_label, self.device_label,
             *self._run_labels],
            priority=[self.load_bar, self.cancel_load_button, self.load_label, self.speed_label, self.passes_label,
                      self.alpha_label, self.models_label, self.device_label, self.message_label],
            whole=(self.load_bar, self.cancel_load_button, self.load_label))  # a load's step is read first
        self.addPermanentWidget(self.line, 1)
        # The message is the line's first label (cut with "…" when short of room), not text painted under it.
        self.messageChanged.connect(self._show_message)
        self.end_load_progress()

    def _show_message(self, text: str) -> None:
        self.message_label.setText(text)
        self.line.relayout()

    def paintEvent(self, _event) -> None:
        """The panel only: the message is the line's label (QStatusBar would paint it uncut under the line)."""
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelStatusBar, option, painter, self)

    def show_load_progress(self, message: str, done: int, total: int) -> None:
        """A load's step and how far it is (total 0: busy, size unknown). The last run's figures make room."""
        step = _load_step(message)
        self.load_label.setText(step)
        self.load_label.set_tip("" if step.lower() == message.lower() else message)
        self.load_bar.setRange(0, max(total, 0))
        self.load_bar.setValue(done)
        for widget in self._run_labels:
            widget.hide()
        for widget in (self.load_label, self.load_bar, self.cancel_load_button):
            widget.show()
        self.line.relayout()

    def end_load_progress(self) -> None:
        for widget in (self.load_label, self.load_bar, self.cancel_load_button):
            widget.hide()
        for widget in self._run_labels:
            widget.show()
        self.line.relayout()

    def show_models(self, models: ModelsSummary | None) -> None:
        if models is None:
            self.models_label.setText("no models")
            self.models_label.set_tip("")
            self.device_label.setText("")
            self.line.relayout()
            return
        draft_name = models.draft_name
        draft = f" ← {short_model_name(draft_name)}" if draft_name else ""
        self.models_label.setText(f"{short_model_name(models.target_name)}{draft}")
        self.models_label.set_tip(f"target: {models.target_name}" + (f"\ndraft: {draft_name}" if draft_name else ""),
                                  holds_text=True)
        self._device = f"{_short(models.device)} · {_short(models.dtype)}"
        self.show_execution(models.execution)

    def show_execution(self, execution: str | ExecutionMode) -> None:
        """The mode the models run in: the loaded one, then what each run's start event says is in use."""
        if isinstance(execution, ExecutionMode):
            execution = mode_label(execution.cache, execution.compiled)
        self.device_label.setText(f"{self._device} · {execution}")
        self.device_label.set_tip(EXECUTION_TIP)
        self.line.relayout()  # now, not when the texts' layout requests come: a grab or paint sees it laid out

    def show_run(self, tokens_per_s: float | None, alpha: float | None, passes: int, tokens: int,
                 acceptance_rate: float | None = None) -> None:
        self.speed_label.setText("" if tokens_per_s is None else f"{tokens_per_s:.1f} tokens/s")
        rate = "" if acceptance_rate is None else f" · accepted/drafted {acceptance_rate:.2f}"
        self.alpha_label.setText(("α —" if alpha is None else f"α {alpha:.2f}") + rate)
        self.alpha_label.set_tip("α = accepted / tested positions (accepted + passes that ended in a rejection): "
                                 "the α of E(α, K).\naccepted/drafted: the draft acceptance rate, lower for K > 1.")
        self.passes_label.setText(f"{passes} passes · {tokens} tokens")
        self.line.relayout()


def short_model_name(name: str) -> str:
    """A hub id as it is; a folder as its last two parts ("demo/target"), the full path is in the tooltip."""
    path = Path(name).expanduser()
    if not (name.startswith((".", "/", "~")) or path.is_absolute() or path.exists()):
        return name
    return "/".join(path.resolve().parts[-2:])


def _load_step(message: str) -> str:
    """'loading /long/path/demo/target' -> 'Loading demo/target': the step, short enough for the status bar.

    Only a last word that can name a model is shortened; a step count ('compiling target: verify 8 rows
    (4/16)') stays as it is without looking at the disk."""
    head, _, last = message.rpartition(" ")
    if head and "/" in last and not STEP_COUNT.fullmatch(last):
        message = f"{head} {short_model_name(last)}"
    return message[:1].upper() + message[1:]


def _short(value) -> str:
    """'torch.float32' -> 'float32'; devices print as they are."""
    return str(value).removeprefix("torch.")
