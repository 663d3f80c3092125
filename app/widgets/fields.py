"""Number fields shared by the panels.

A number typed outside a field's range is not silently replaced by the nearest
allowed one: the field turns red and says what is allowed (`sig_range_error`,
and its tooltip) until the value is corrected; Qt restores the last valid value
only when the field loses focus, and the message stays in the tooltip until
the next valid edit.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox, QToolTip

DECIMALS = 3
ERROR_STYLE = "border: 2px solid #c0392b;"


class _RangeChecked:
    """Says so when the typed number lies outside the range (mixed into a spin box)."""

    sig_range_error: Signal

    def _check_range(self, text: str) -> None:
        number = _number(text.removeprefix(self.prefix()).removesuffix(self.suffix()).strip())
        low, high = self.minimum(), self.maximum()
        if number is not None and not low <= number <= high:
            message = (f"{self._name} must be from {self.textFromValue(low)} to {self.textFromValue(high)}: "
                       f"{text.strip()} is out of range")
            self.setStyleSheet(ERROR_STYLE)
            self.setToolTip(message)
            if self.isVisible():
                QToolTip.showText(self.mapToGlobal(self.rect().bottomLeft()), message, self)
            self.range_error = message
            self.sig_range_error.emit(message)
        elif self.range_error is not None and number is not None:
            self.setStyleSheet("")
            self.setToolTip(self._tip)
            self.range_error = None
            self.sig_range_error.emit(None)


class CheckedSpinBox(QSpinBox, _RangeChecked):
    sig_range_error = Signal(object)  # str: what is allowed; None once the value is in range again

    def __init__(self, name: str, tip: str) -> None:
        super().__init__()
        self._name, self._tip, self.range_error = name, tip, None

    def validate(self, text: str, pos: int):
        self._check_range(text)
        return super().validate(text, pos)


class CheckedDoubleSpinBox(QDoubleSpinBox, _RangeChecked):
    sig_range_error = Signal(object)

    def __init__(self, name: str, tip: str) -> None:
        super().__init__()
        self._name, self._tip, self.range_error = name, tip, None

    def validate(self, text: str, pos: int):
        self._check_range(text)
        return super().validate(text, pos)


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def spin_box(low: float, high: float, value: float, tip: str, step: float | None = None,
             name: str | None = None) -> QSpinBox | QDoubleSpinBox:
    """A number field that reports one change per finished edit; with a `step`, a decimal one. `name` is how
    its range error names it (the tip's first words by default)."""
    label = name or tip.split(":")[0].split("(")[0].strip()
    label = label[:1].upper() + label[1:]
    spin: QSpinBox | QDoubleSpinBox
    if step is None:
        spin = CheckedSpinBox(label, tip)
    else:
        spin = CheckedDoubleSpinBox(label, tip)
        spin.setDecimals(DECIMALS)  # before the range and value, which it rounds
        spin.setSingleStep(step)
    spin.setRange(low, high)
    spin.setValue(value)
    spin.setToolTip(tip)
    spin.setKeyboardTracking(False)  # one change per finished edit, not per keystroke
    return spin

