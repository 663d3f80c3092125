"""Prompt editor and run controls: Generate (Ctrl+Enter), Stop (Esc), Pause, Step."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QGridLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.widgets.fields import spin_box

MAX_TOKENS_LIMIT = 100_000
PROMPT_MIN_LINES = 4  # the editor's least height, in lines of text
CHAT_TEMPLATE_TIP = "Wrap the prompt in the tokenizer's chat template (instruction-tuned models)"
NO_CHAT_TEMPLATE_TIP = ("The loaded models have no chat template (they are not chat models): "
                        "the prompt is continued as it is")


class PromptEdit(QPlainTextEdit):
    """The prompt editor: asks for no more height than its minimum (a few lines) and takes whatever the panel
    has left (its stretch). The editor's usual hint (about 190 px) would push the buttons and fields under it
    out of a 1024x700 window's dock."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._fit_height()

    def _fit_height(self) -> None:
        frame = 2 * (self.frameWidth() + int(self.document().documentMargin()))
        self.setMinimumHeight(PROMPT_MIN_LINES * self.fontMetrics().lineSpacing() + frame)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # the Classroom layout's larger font: a few larger lines
            self._fit_height()

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self.minimumHeight())


class ControlsPanel(QWidget):
    """Emits requests; the main window decides what they mean in the current state."""

    sig_generate = Signal()
    sig_stop = Signal()
    sig_pause = Signal(bool)  # True = pause, False = resume
    sig_step = Signal()
    sig_changed = Signal()  # max tokens / seed / chat template edited

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.prompt = PromptEdit()
        self.prompt.setPlaceholderText("Type a prompt, then press Ctrl+Enter")
        self.prompt.setObjectName("prompt")
        self.generate_button = QPushButton("Generate")
        self.generate_button.setToolTip("Generate (Ctrl+Enter)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop (Esc)")
        self.pause_button = QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.step_button = QPushButton("Step")
        self.step_button.setToolTip("Run exactly one more pass while paused")
        self.max_tokens = spin_box(1, MAX_TOKENS_LIMIT, 128, "max new tokens", name="Max new tokens")
        self.seed = spin_box(0, 2**31 - 1, 0, "seed of the sampler", name="Seed")
        self.chat_template = QCheckBox("Apply the chat template")
        self.chat_template.setToolTip(CHAT_TEMPLATE_TIP)
        self.model_hint = QLabel()
        self.model_hint.setObjectName("modelHint")
        self.model_hint.setWordWrap(True)
        self.model_hint.hide()
        self._layout()
        self._connect()
        self.set_running(False)

    def _layout(self) -> None:
        """Two buttons a row and labels that go above their fields when narrow: the panel fits its dock's
        default width (330 px) with room to spare, so it never scrolls sideways."""
        buttons = QGridLayout()
        for i, button in enumerate((self.generate_button, self.stop_button, self.pause_button, self.step_button)):
            buttons.addWidget(button, i // 2, i % 2)
        form = QFormLayout()
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        form.addRow("Max new tokens", self.max_tokens)
        form.addRow("Seed", self.seed)
        form.addRow(self.chat_template)
        column = QVBoxLayout(self)
        column.addWidget(self.prompt, 1)
        column.addWidget(self.model_hint)
        column.addLayout(buttons)
        column.addLayout(form)

    def _connect(self) -> None:
        self.generate_button.clicked.connect(self.sig_generate)
        self.stop_button.clicked.connect(self.sig_stop)
        self.pause_button.toggled.connect(self._on_pause_toggled)
        self.step_button.clicked.connect(self.sig_step)
        for seq in ("Ctrl+Return", "Ctrl+Enter"):
            QShortcut(QKeySequence(seq), self, self._shortcut_generate, context=Qt.ShortcutContext.WindowShortcut)
        QShortcut(QKeySequence("Esc"), self, self.sig_stop.emit, context=Qt.ShortcutContext.WindowShortcut)
        self.max_tokens.valueChanged.connect(self.sig_changed)
        self.seed.valueChanged.connect(self.sig_changed)
        self.chat_template.toggled.connect(self.sig_changed)

    def _shortcut_generate(self) -> None:
        if self.generate_button.isEnabled():
            self.sig_generate.emit()

    def _on_pause_toggled(self, paused: bool) -> None:
        self.pause_button.setText("Resume" if paused else "Pause")
        self.sig_pause.emit(paused)

    def set_running(self, running: bool) -> None:
        self.generate_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.pause_button.setEnabled(running)
        self.step_button.setEnabled(running)
        if not running:
            self.show_paused(False)

    def show_paused(self, paused: bool) -> None:
        """Reflect the pause state without requesting anything."""
        self.pause_button.blockSignals(True)
        self.pause_button.setChecked(paused)
        self.pause_button.setText("Resume" if paused else "Pause")
        self.pause_button.blockSignals(False)

    def limit_max_tokens(self, context_length: int) -> None:
        """Max new tokens can be no more than the loaded model's context holds."""
        self.max_tokens.setMaximum(max(1, min(MAX_TOKENS_LIMIT, context_length)))
        self.max_tokens.setToolTip(f"max new tokens: at most {self.max_tokens.maximum()}, the model's context")

    def offer_chat_template(self, available: bool) -> None:
        """Enable the chat template option only for models that have one; otherwise say why it is off."""
        if not available:
            self.chat_template.setChecked(False)
        self.chat_template.setEnabled(available)
        self.chat_template.setToolTip(CHAT_TEMPLATE_TIP if available else NO_CHAT_TEMPLATE_TIP)

    def set_model_hint(self, hint: str, placeholder: str) -> None:
        """What the loaded models are good at, under the prompt and as the empty prompt's placeholder."""
        self.model_hint.setText(hint)
        self.model_hint.setVisible(bool(hint))
        self.prompt.setPlaceholderText(placeholder)

    @property
    def prompt_text(self) -> str:
        return self.prompt.toPlainText()
