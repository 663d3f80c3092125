"""Speed control: full speed, or slow motion in passes per second, so a class can follow a fast drafter."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox

# (label, passes per second; 0 = as fast as the engine goes)
SPEEDS = (("Full speed", 0.0), ("20 passes/s", 20.0), ("10 passes/s", 10.0), ("4 passes/s", 4.0),
          ("2 passes/s", 2.0), ("1 pass/s", 1.0), ("1 pass / 2 s", 0.5))


class SpeedControl(QComboBox):
    """Emits the minimum interval between passes (seconds; 0 = full speed) the chosen speed asks for."""

    sig_interval_changed = Signal(float)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("speedControl")
        self.setToolTip("Slow motion: at most this many passes per second, so a class can watch each pass")
        for label, rate in SPEEDS:
            self.addItem(label, rate)
        self.currentIndexChanged.connect(lambda _index: self.sig_interval_changed.emit(self.interval_s))

    @property
    def rate(self) -> float:
        """Passes per second chosen (0 = full speed)."""
        return float(self.currentData())

    @property
    def interval_s(self) -> float:
        rate = float(self.currentData())
        return 0.0 if rate <= 0 else 1.0 / rate

    def set_rate(self, passes_per_s: float) -> None:
        """Choose the listed speed closest to `passes_per_s` (0 = full speed)."""
        index = min(range(self.count()), key=lambda i: abs(float(self.itemData(i)) - passes_per_s))
        self.setCurrentIndex(index)
