"""How each token outcome looks: colour (Okabe-Ito, colour-blind safe) AND style.

Colour never carries the meaning alone: every outcome also differs in
weight, slant, underline style or strike-through, so the stream reads the
same in greyscale. Each theme (light / dark) has its own colours so both
stay readable. Every format carries its outcome name in a user property,
which lets tests and the tooltip ask a fragment what it is. The outcome
names are the engine's own (app/engine/events.py); only the prompt is the
view's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from PySide6.QtGui import QColor, QFont, QPalette, QTextCharFormat, QTextFormat

from app.engine.events import ACCEPTED, ASD_EXCEPTION, BONUS, REJECTED, RESAMPLED, TARGET

# The view's own properties of text formats, one id each.
OUTCOME_PROPERTY = QTextFormat.Property.UserProperty + 1  # char format: the outcome name of a token's text
CONTINUES_PROPERTY = QTextFormat.Property.UserProperty + 2  # block format: a paragraph split only for speed
TREE_MARK_PROPERTY = QTextFormat.Property.UserProperty + 3  # char format: a pass's branch count, not text
PASS_ROW_PROPERTY = QTextFormat.Property.UserProperty + 4  # block format: one pass per line, this row is a pass
CHANGE_MARK_PROPERTY = QTextFormat.Property.UserProperty + 5  # char format: a change marker, not text
PROMPT = "prompt"
STYLE_NAMES = (PROMPT, ACCEPTED, REJECTED, RESAMPLED, BONUS, ASD_EXCEPTION, TARGET)

LABELS = {
    PROMPT: "prompt",
    ACCEPTED: "accepted draft",
    REJECTED: "rejected draft",
    RESAMPLED: "resampled / correction",
    BONUS: "bonus",
    ASD_EXCEPTION: "ASD exception",
    TARGET: "target only (no draft)",
}

EXPLANATIONS = {
    PROMPT: "Your prompt.",
    ACCEPTED: "Drafted, and the target agreed: came almost for free.",
    REJECTED: "Drafted, then discarded by the verifier (ghost text, struck through).",
    RESAMPLED: "The target's own token at the first rejection (correction or residual sample).",
    BONUS: "Every draft was accepted, so the target added one more token.",
    ASD_EXCEPTION: "A mismatch ASD accepted on purpose, paid from the regret budget.",
    TARGET: "Nothing was drafted: a plain autoregressive step.",
}


@dataclass(frozen=True)
class Look:
    light: str | None  # foreground on a light background; None = palette text
    dark: str | None
    bold: bool = False
    italic: bool = False
    underline: QTextCharFormat.UnderlineStyle = QTextCharFormat.UnderlineStyle.NoUnderline
    strike: bool = False
    tint_light: str | None = None  # background tint
    tint_dark: str | None = None


LOOKS = {
    PROMPT: Look("#6b6b6b", "#9a9a9a", italic=True),
    ACCEPTED: Look("#0060a0", "#56b4e9", tint_light="#e3eff8", tint_dark="#15314a"),
    REJECTED: Look("#8c8c8c", "#808080", italic=True, strike=True),
    RESAMPLED: Look("#b34700", "#f0a060", bold=True,
                    underline=QTextCharFormat.UnderlineStyle.DotLine),
    BONUS: Look("#00785a", "#3ccf9f", bold=True,
                underline=QTextCharFormat.UnderlineStyle.SingleUnderline),
    ASD_EXCEPTION: Look("#a2407a", "#e08ec0", italic=True,
                        underline=QTextCharFormat.UnderlineStyle.WaveUnderline),
    TARGET: Look(None, None),
}


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Base).lightness() < 128


def make_format(name: str, dark: bool) -> QTextCharFormat:
    look = LOOKS[name]
    fmt = QTextCharFormat()
    fmt.setProperty(OUTCOME_PROPERTY, name)
    colour = look.dark if dark else look.light
    if colour:
        fmt.setForeground(QColor(colour))
    tint = look.tint_dark if dark else look.tint_light
    if tint:
        fmt.setBackground(QColor(tint))
    fmt.setFontWeight(QFont.Weight.Bold if look.bold else QFont.Weight.Normal)
    fmt.setFontItalic(look.italic)
    fmt.setFontStrikeOut(look.strike)
    fmt.setUnderlineStyle(look.underline)
    if look.underline != QTextCharFormat.UnderlineStyle.NoUnderline and colour:
        fmt.setUnderlineColor(QColor(colour))
    return fmt


def make_formats(dark: bool) -> dict[str, QTextCharFormat]:
    return {name: make_format(name, dark) for name in STYLE_NAMES}


def outcome_of(fmt: QTextCharFormat) -> str | None:
    value = fmt.property(OUTCOME_PROPERTY)
    return value if isinstance(value, str) else None


TOKEN_LABEL_CHARS = 10


def token_label(text: str, token_id: int) -> str:
    """Visible text of a token: whitespace made visible, empty (partial UTF-8) tokens shown by id."""
    if not text:
        return f"#{token_id}"
    shown = text.replace("\n", "↵").replace("\t", "⇥")
    if shown.startswith(" "):
        shown = "␣" + shown[1:]
    return shown if len(shown) <= TOKEN_LABEL_CHARS else shown[: TOKEN_LABEL_CHARS - 1] + "…"


def number_text(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.4g}"
