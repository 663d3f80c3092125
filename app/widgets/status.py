"""Status bar: what is loaded (device, dtype, models), how a load goes (its step, a bar, Cancel) and how the
run goes (tokens/s, alpha, passes).

alpha = accepted / (accepted + passes that ended in a rejection) and the acceptance rate = accepted /
drafted are the engine's (app/engine/stats.py, docs/ALGORITHMS.md §7.1-§7.2).
"""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QToolButton

from app.engine.engine import ModelsSummary
from app.engine.events import ExecutionMode
from app.engine.execution import mode_label

EXECUTION_TIP = ("How the models run: a dynamic KV cache grows and is cropped; a static one is preallocated and "
                 "rolled back by moving its write position;\ncompiled: the short forwards run through torch.compile "
                 "(CUDA graphs on a GPU). Chosen when loading (File → Load models…, --cache, --compile).")


# A step count in a progress message ("(4/16)", "3/14,"): never a model's folder, whatever the disk holds.
STEP_COUNT = re.compile(r"\(?\d+/\d+\)?[,.:;]?")


class RunStatusBar(QStatusBar):
    sig_cancel_load = Signal()  # the load progress's Cancel was clicked

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.models_label = QLabel("no models")
        self.device_label = QLabel("")
        self._device = ""  # "cpu · float32": what the mode in use is shown after
        self.speed_label = QLabel("")
        self.speed_label.setObjectName("tokensPerSecond")
        self.alpha_label = QLabel("")
        self.passes_label = QLabel("")
        self.load_label = QLabel("")
        self.load_label.setObjectName("loadProgressText")
        self.load_bar = QProgressBar()
        self.load_bar.setObjectName("loadProgress")
        self.load_bar.setFixedWidth(160)
        self.load_bar.setMaximumHeight(16)
        self.cancel_load_button = QToolButton()
        self.cancel_load_button.setObjectName("cancelLoad")
        self.cancel_load_button.setText("Cancel")
        self.cancel_load_button.setToolTip("Stop loading these models; the models in use stay")
        self.cancel_load_button.clicked.connect(self.sig_cancel_load)
        for widget in (self.load_label, self.load_bar, self.cancel_load_button, self.models_label, self.device_label,
                       self.speed_label, self.alpha_label, self.passes_label):
            self.addPermanentWidget(widget)
        self.end_load_progress()

    def show_load_progress(self, message: str, done: int, total: int) -> None:
        """A load's step and how far it is (total 0: busy, size unknown)."""
        self.load_label.setText(_load_step(message))
        self.load_label.setToolTip(message)
        self.load_bar.setRange(0, max(total, 0))
        self.load_bar.setValue(done)
        for widget in (self.load_label, self.load_bar, self.cancel_load_button):
            widget.show()

    def end_load_progress(self) -> None:
        for widget in (self.load_label, self.load_bar, self.cancel_load_button):
            widget.hide()

    def show_models(self, models: ModelsSummary | None) -> None:
        if models is None:
            self.models_label.setText("no models")
            self.device_label.setText("")
            return
        draft_name = models.draft_name
        draft = f" ← {short_model_name(draft_name)}" if draft_name else ""
        self.models_label.setText(f"{short_model_name(models.target_name)}{draft}")
        self.models_label.setToolTip(f"target: {models.target_name}" + (f"\ndraft: {draft_name}" if draft_name else ""))
        self._device = f"{_short(models.device)} · {_short(models.dtype)}"
        self.show_execution(models.execution)

    def show_execution(self, execution: str | ExecutionMode) -> None:
        """The mode the models run in: the loaded one, then what each run's start event says is in use."""
        if isinstance(execution, ExecutionMode):
            execution = mode_label(execution.cache, execution.compiled)
        self.device_label.setText(f"{self._device} · {execution}")
        self.device_label.setToolTip(EXECUTION_TIP)

    def show_run(self, tokens_per_s: float | None, alpha: float | None, passes: int, tokens: int,
                 acceptance_rate: float | None = None) -> None:
        self.speed_label.setText("" if tokens_per_s is None else f"{tokens_per_s:.1f} tokens/s")
        rate = "" if acceptance_rate is None else f" · accepted/drafted {acceptance_rate:.2f}"
        self.alpha_label.setText(("α —" if alpha is None else f"α {alpha:.2f}") + rate)
        self.alpha_label.setToolTip("α = accepted / tested positions (accepted + passes that ended in a rejection): "
                                    "the α of E(α, K).\naccepted/drafted: the draft acceptance rate, lower for K > 1.")
        self.passes_label.setText(f"{passes} passes · {tokens} tokens")


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
