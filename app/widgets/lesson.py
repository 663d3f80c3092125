"""The guided lesson's panel: ten steps, each run live on the loaded models and explained from that run.

The panel only shows: the window runs a step (`sig_run_step`), and hands the
finished run back (`show_result`), which writes the step's sentence from it
(app/teaching/lesson.py) and says which pass to point at. Steps that share
their settings share one run, so the class watches the same text while the
first steps take it apart.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.teaching.lesson import STEPS, Explanation, LessonRun, LessonStep, explain_step

SENTENCE_PX = 16
WAITING = "Running this step on the loaded models…"
START = "Press “Run step” to run the first step live; each step's sentence is written from what the run did."


class LessonPanel(QWidget):
    sig_run_step = Signal(object)  # LessonStep: run it (the window calls show_result when it has finished)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.runs: dict[str, LessonRun] = {}  # step key -> the run its sentence was written from
        self.explanation: Explanation | None = None
        self.steps = QComboBox()  # compact: the sentence gets the panel's height
        self.steps.setObjectName("lessonSteps")
        for step in STEPS:
            self.steps.addItem(step.title)
        self.sentence = QLabel(START)
        self.sentence.setTextFormat(Qt.TextFormat.PlainText)
        self.sentence.setObjectName("lessonSentence")
        self.sentence.setWordWrap(True)
        self.sentence.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.sentence.setStyleSheet(f"font-size: {SENTENCE_PX}px;")
        self.back_button = QPushButton("◀ Back")
        self.run_button = QPushButton("Run step")
        self.next_button = QPushButton("Next ▶")
        self.back_button.clicked.connect(lambda: self.select(self.index - 1))
        self.next_button.clicked.connect(self.run_next)
        self.run_button.clicked.connect(self.run_current)
        self.steps.currentIndexChanged.connect(self._on_row)
        buttons = QHBoxLayout()
        for button in (self.back_button, self.run_button, self.next_button):
            buttons.addWidget(button)
        column = QVBoxLayout(self)
        column.addWidget(self.steps)
        column.addLayout(buttons)
        column.addWidget(self.sentence, 1, Qt.AlignmentFlag.AlignTop)
        self.select(0)

    @property
    def index(self) -> int:
        return self.steps.currentIndex()

    @property
    def step(self) -> LessonStep:
        return STEPS[self.index]

    def select(self, index: int) -> None:
        self.steps.setCurrentIndex(max(0, min(len(STEPS) - 1, index)))

    def _on_row(self, row: int) -> None:
        if row < 0:
            return
        run = self.runs.get(STEPS[row].key)
        if run is not None:
            self._show(explain_step(STEPS[row], run, self.runs))
        else:
            self.sentence.setText(START if row == 0 else "Press “Run step” to run this step live.")
        self.back_button.setEnabled(row > 0)
        self.next_button.setEnabled(row < len(STEPS) - 1)

    def run_current(self) -> None:
        self.sentence.setText(WAITING)
        self.sig_run_step.emit(self.step)

    def run_next(self) -> None:
        self.select(self.index + 1)
        self.run_current()

    def show_result(self, step: LessonStep, run: LessonRun) -> Explanation:
        """Write `step`'s sentence from its finished run, and show it if the step is still the current one."""
        self.runs[step.key] = run
        explanation = explain_step(step, run, self.runs)
        if step is self.step:
            self._show(explanation)
        return explanation

    def show_failure(self, message: str) -> None:
        self.sentence.setText(message)

    def _show(self, explanation: Explanation) -> None:
        self.explanation = explanation
        self.sentence.setText(explanation.sentence)
