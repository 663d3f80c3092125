"""Number fields shared by the panels."""

from __future__ import annotations

from typing import Any, overload

from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox

DECIMALS = 3


@overload
def spin_box(low: int, high: int, value: int, tip: str, step: None = None) -> QSpinBox: ...
@overload
def spin_box(low: float, high: float, value: float, tip: str, step: float) -> QDoubleSpinBox: ...
def spin_box(low: float, high: float, value: float, tip: str, step: float | None = None) -> QSpinBox | QDoubleSpinBox:
    """A number field that reports one change per finished edit; with a `step`, a decimal one."""
    spin: Any  # a QSpinBox takes whole numbers, a QDoubleSpinBox decimals: the overloads say which a caller gets
    if step is None:
        spin = QSpinBox()
    else:
        spin = QDoubleSpinBox()
        spin.setDecimals(DECIMALS)  # before the range and value, which it rounds
        spin.setSingleStep(step)
    spin.setRange(low, high)
    spin.setValue(value)
    spin.setToolTip(tip)
    spin.setKeyboardTracking(False)  # one change per finished edit, not per keystroke
    return spin
