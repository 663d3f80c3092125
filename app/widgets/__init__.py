"""The playground's Qt widgets."""

from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


def on_screen(widget) -> bool:
    """True when some pixel of `widget` shows: a dock behind another tab reports isVisible() all the same."""
    return widget.isVisible() and not widget.visibleRegion().isEmpty()


def scrolled(widget: QWidget) -> QScrollArea:
    """`widget` in a frameless scroll area that resizes it: shown whole where there is room, scrolled where not."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(widget)
    return area
