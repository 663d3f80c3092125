"""The window's look in one place: text sizes and colours for normal and presentation mode.

Every chart, and any view that wants to follow presentation mode, reads the
current `Theme` from `theme_hub()` and restyles itself when
`ThemeHub.sig_changed` fires. A theme is plain data (a frozen dataclass):

    background, text        the chart's background and every piece of its text
                            (title, axis labels, ticks, legend); contrast >= 4.5:1 (WCAG AA)
    marker, overall         change markers with their labels, and the all-drafters α line
    chart_px, title_px      chart text and chart title sizes in pixels
    stream_px               the token stream's text size in pixels
    line_px                 width of the main curves

Presentation mode is high contrast (black on white, or white on black) with
chart text of at least 16 px. Drafters get a STABLE colour from a
colour-blind-safe palette (Okabe-Ito, plus Tol's wine as a ninth): the
colour follows the drafter's name, never its order in a run.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

import shiboken6
from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QGuiApplication, QPalette

# Okabe & Ito (2008), "Color Universal Design": distinguishable with the common colour-vision deficiencies.
OKABE_ITO = {
    "blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "purple": "#CC79A7",
    "sky": "#56B4E9", "vermillion": "#D55E00", "yellow": "#F0E442", "black": "#000000",
}
WINE = "#882255"  # Tol's muted wine: a ninth hue for the ninth built-in drafter

# One hue per built-in drafter, fixed. The draft model and MTP, often compared, sit far apart (blue / vermillion).
DRAFTER_HUES = {
    "draft-model": OKABE_ITO["blue"],
    "prompt-lookup": OKABE_ITO["orange"],
    "ngram-cache": OKABE_ITO["green"],
    "suffix-tree": OKABE_ITO["purple"],
    "layer-skip": OKABE_ITO["sky"],
    "medusa": OKABE_ITO["black"],
    "mtp": OKABE_ITO["vermillion"],
    "eagle": WINE,
    "dflash": OKABE_ITO["yellow"],
}
# On a light background yellow is too faint, on a dark one black vanishes: each has a stand-in there.
LIGHT_STAND_INS = {OKABE_ITO["yellow"]: "#9C8A00"}
DARK_STAND_INS = {OKABE_ITO["black"]: "#E8E8E8", WINE: "#D47FA6"}
OTHER_HUES = tuple(OKABE_ITO.values()) + (WINE,)  # a drafter outside the table: picked by its name's hash


@dataclass(frozen=True)
class Theme:
    name: str
    background: str
    text: str
    grid_alpha: float
    chart_px: int
    title_px: int
    stream_px: int
    line_px: float
    dark: bool = False
    presentation: bool = False
    marker: str = "#B34700"  # change markers and their labels (text: 4.5:1 on the background)
    overall: str = "#5A5A5A"  # the all-drafters α line, apart from every drafter's hue

    def drafter_colour(self, name: str | None) -> str:
        return drafter_colour(name, self.dark)


NORMAL = Theme("normal", background="#FFFFFF", text="#1F1F1F", grid_alpha=0.25, chart_px=12, title_px=13,
               stream_px=14, line_px=2.0)
NORMAL_DARK = Theme("normal dark", background="#1E1E1E", text="#E6E6E6", grid_alpha=0.3, chart_px=12,
                    title_px=13, stream_px=14, line_px=2.0, dark=True, marker="#F0A060", overall="#B0B0B0")
PRESENTATION = Theme("presentation", background="#FFFFFF", text="#000000", grid_alpha=0.35, chart_px=18,
                     title_px=22, stream_px=22, line_px=3.5, presentation=True)
PRESENTATION_DARK = Theme("presentation dark", background="#000000", text="#FFFFFF", grid_alpha=0.4, chart_px=18,
                          title_px=22, stream_px=22, line_px=3.5, dark=True, presentation=True, marker="#F0A060",
                          overall="#B0B0B0")


def theme_for(presentation: bool, dark: bool = False) -> Theme:
    if presentation:
        return PRESENTATION_DARK if dark else PRESENTATION
    return NORMAL_DARK if dark else NORMAL


def drafter_colour(name: str | None, dark: bool = False) -> str:
    """The drafter's colour: the same for the same name in every run, whatever the order drafters appear in."""
    hue = DRAFTER_HUES.get(name or "")
    if hue is None:
        hue = OTHER_HUES[zlib.crc32((name or "").encode("utf-8")) % len(OTHER_HUES)]
    stand_ins = DARK_STAND_INS if dark else LIGHT_STAND_INS
    return stand_ins.get(hue, hue)


def contrast_ratio(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio (L1 + 0.05) / (L2 + 0.05) of two '#RRGGBB' colours, 1..21."""
    lighter, darker = sorted((relative_luminance(foreground), relative_luminance(background)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def relative_luminance(colour: str) -> float:
    """WCAG 2 relative luminance of '#RRGGBB'."""
    channels = [int(colour.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


class ThemeHub(QObject):
    """The current theme; views restyle on `sig_changed`. One per application (`theme_hub()`)."""

    sig_changed = Signal(object)  # Theme

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._presentation = False
        self._dark = _desktop_is_dark()
        self._scale = 1.0
        self.theme = theme_for(False, self._dark)

    def set_presentation(self, on: bool) -> None:
        """Presentation mode (high contrast, large chart text) on or off."""
        self._presentation = on
        self._update()

    def set_dark(self, dark: bool) -> None:
        self._dark = dark
        self._update()

    def set_text_scale(self, scale: float) -> None:
        """Scale the chart and stream text sizes (the Classroom layout's larger fonts)."""
        self._scale = scale
        self._update()

    @property
    def presentation(self) -> bool:
        return self._presentation

    def _update(self) -> None:
        base = theme_for(self._presentation, self._dark)
        scaled = replace(base, chart_px=round(base.chart_px * self._scale), title_px=round(base.title_px * self._scale),
                         stream_px=round(base.stream_px * self._scale))
        if scaled != self.theme:
            self.theme = scaled
            self.sig_changed.emit(scaled)


def _desktop_is_dark() -> bool:
    """The charts follow a dark desktop palette (as the token colours do: app/widgets/token_style.py)."""
    app = QGuiApplication.instance()
    return isinstance(app, QGuiApplication) and app.palette().color(QPalette.ColorRole.Base).lightness() < 128


_HUB: ThemeHub | None = None


def theme_hub() -> ThemeHub:
    """The application's theme hub (made on first use)."""
    global _HUB
    if _HUB is None:
        _HUB = ThemeHub()
    return _HUB


def current_theme() -> Theme:
    return theme_hub().theme


def follow_theme(owner: QObject, apply: Callable[[Theme], None]) -> None:
    """Call `apply` with the current theme now and whenever it changes, until `owner` is destroyed or its
    graphics are gone (a closed pyqtgraph view clears its scene: its plots can no longer be styled)."""
    hub = theme_hub()
    apply(hub.theme)
    following = [True]

    def stop() -> None:
        if following[0]:
            following[0] = False
            if shiboken6.isValid(hub):  # at exit the hub may go first
                hub.sig_changed.disconnect(restyle)

    def restyle(theme: Theme) -> None:
        if not following[0]:
            return
        # Deleted on the C++ side (its Python wrapper still about), or a pyqtgraph view closed (its plot gone).
        if not shiboken6.isValid(owner) or getattr(owner, "closed", False):
            stop()
            return
        try:
            apply(theme)
        except RuntimeError:  # "Internal C++ object already deleted": a part of the view was closed
            stop()

    hub.sig_changed.connect(restyle)
    owner.destroyed.connect(lambda *_: stop())
