"""Number fields shared by the panels."""

from __future__ import annotations

from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox

DECIMALS = 3


def spin_box(low: float, high: float, value: float, tip: str, step: float | None = None) -> QSpinBox | QDoubleSpinBox:
    """A number field that reports one change per finished edit; with a `step`, a decimal one."""
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
