"""The playground's Qt widgets."""


def on_screen(widget) -> bool:
    """True when some pixel of `widget` shows: a dock behind another tab reports isVisible() all the same."""
    return widget.isVisible() and not widget.visibleRegion().isEmpty()
