"""The text around a chart laid out to a width in pixels: a title in as many lines as its words need, and a
legend as a compact table (entries packed beside each other, a long one broken between words, notes in italics).

The run charts give each plot's text the width of the column it sits in, so five plots fit in one row of a
small window with their titles and legends whole, wrapped rather than clipped or elided.
"""

from __future__ import annotations

import html

from PySide6.QtGui import QFontMetricsF

from app.widgets.chart_style import font_px

ENTRY_GAP = "\u00a0" * 3  # between entries on one legend line
INDENT = "\u00a0" * 2  # a broken entry's next lines, under its name


def word_lines(text: str, metrics: QFontMetricsF, width: float, first_room: float | None = None) -> list[str]:
    """`text` broken between words into lines no wider than `width` (a word wider than that has a line of its
    own); the first line has `first_room` (default `width`)."""
    lines: list[str] = []
    line = ""
    room = width if first_room is None else first_room
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if line and metrics.horizontalAdvance(candidate) > room:
            lines.append(line)
            line, room = word, width
        else:
            line = candidate
    lines.append(line)
    return lines


def title_html(title: str, px: int, width: float | None, short: str | None = None) -> str:
    """A plot title at `width` pixels: the title on one line, else its `short` form (on as many lines as it
    needs); the title as it is when `width` is None."""
    metrics = QFontMetricsF(font_px(px))
    if width is None or metrics.horizontalAdvance(title) <= width:
        return html.escape(title)
    shown = short if short is not None else title
    return "<br>".join(html.escape(line) for line in word_lines(shown, metrics, width))


def legend_html(entries: list[tuple[str, str, str]], notes: list[str], px: int, width: float,
                line_chars: int) -> str:
    """Entries (colour, glyph, name) packed beside each other in lines of about `line_chars` characters and no
    wider than `width` pixels, each glyph in its colour; an entry too wide for a line of its own is broken between
    words; then each note, in italics, broken the same way."""
    metrics = QFontMetricsF(font_px(px))
    pack = min(width, metrics.averageCharWidth() * line_chars)
    gap = metrics.horizontalAdvance(ENTRY_GAP)
    lines: list[str] = []
    line: list[str] = []
    used = 0.0
    for colour, glyph, name in entries:
        head = f"{glyph}\u00a0"
        need = metrics.horizontalAdvance(head + name)
        if line and used + gap + need > pack:
            lines.append(ENTRY_GAP.join(line))
            line, used = [], 0.0
        if need <= width - used:
            line.append(f'<span style="color:{colour}">{glyph}</span>\u00a0{html.escape(name)}')
            used += (gap if used else 0.0) + need
            continue
        parts = word_lines(name, metrics, width - metrics.horizontalAdvance(INDENT),
                           first_room=width - metrics.horizontalAdvance(head))
        lines.append(f'<span style="color:{colour}">{glyph}</span>\u00a0{html.escape(parts[0])}')
        lines += [INDENT + html.escape(part) for part in parts[1:]]
    if line:
        lines.append(ENTRY_GAP.join(line))
    for note in notes:
        lines += [f"<i>{html.escape(part)}</i>" for part in word_lines(note, metrics, width)]
    return "<br>".join(lines)
