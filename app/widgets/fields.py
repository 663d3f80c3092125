"""Number fields shared by the panels.

A number typed outside a field's range is not silently replaced by the nearest
allowed one: the field turns red and says what is allowed (`sig_range_error`,
and its tooltip) until the value is corrected; Qt restores the last valid value
only when the field loses focus, and the message stays in the tooltip until
the next valid edit.
"""

from __future__ import annotations

from typing import Any, overload

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox, QToolTip

DECIMALS = 3
ERROR_STYLE = "border: 2px solid #c0392b;"


def _check_range(spin: Any, text: str) -> None:
    """Say so when the typed number lies outside `spin`'s range (a CheckedSpinBox or CheckedDoubleSpinBox)."""
    number = _number(text.removeprefix(spin.prefix()).removesuffix(spin.suffix()).strip())
    low, high = spin.minimum(), spin.maximum()
    if number is not None and not low <= number <= high:
        message = (f"{spin.name} must be from {spin.textFromValue(low)} to {spin.textFromValue(high)}: "
                   f"{text.strip()} is out of range")
        spin.setStyleSheet(ERROR_STYLE)
        spin.setToolTip(message)
        if spin.isVisible():
            QToolTip.showText(spin.mapToGlobal(spin.rect().bottomLeft()), message, spin)
        spin.range_error = message
        spin.sig_range_error.emit(message)
    elif spin.range_error is not None and number is not None:
        spin.setStyleSheet("")
        spin.setToolTip(spin.tip)
        spin.range_error = None
        spin.sig_range_error.emit(None)


class CheckedSpinBox(QSpinBox):
    sig_range_error = Signal(object)  # str: what is allowed; None once the value is in range again

    def __init__(self, name: str, tip: str) -> None:
        super().__init__()
        self.name, self.tip = name, tip
        self.range_error: str | None = None

    def validate(self, text: str, pos: int):
        _check_range(self, text)
        return super().validate(text, pos)


class CheckedDoubleSpinBox(QDoubleSpinBox):
    sig_range_error = Signal(object)  # str: what is allowed; None once the value is in range again

    def __init__(self, name: str, tip: str) -> None:
        super().__init__()
        self.name, self.tip = name, tip
        self.range_error: str | None = None

    def validate(self, text: str, pos: int):
        _check_range(self, text)
        return super().validate(text, pos)


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


@overload
def spin_box(low: int, high: int, value: int, tip: str, step: None = None, name: str | None = None) -> QSpinBox: ...
@overload
def spin_box(low: float, high: float, value: float, tip: str, step: float, name: str | None = None) -> QDoubleSpinBox:
    ...
def spin_box(low: float, high: float, value: float, tip: str, step: float | None = None,
             name: str | None = None) -> QSpinBox | QDoubleSpinBox:
    """A number field that reports one change per finished edit; with a `step`, a decimal one. `name` is how
    its range error names it (the tip's first words by default)."""
    label = name or tip.split(":")[0].split("(")[0].strip()
    label = label[:1].upper() + label[1:]
    spin: Any  # a QSpinBox takes whole numbers, a QDoubleSpinBox decimals: the overloads say which a caller gets
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

