"""The in-app guide: what the colours, charts, knobs and formulas mean, and ready prompts that show contrasts.

A read-only help page (shown on first launch). Each ready prompt has two
links: "Use" puts the prompt and its set-up into the window, "Race" also
starts a race against plain decoding. The window decides what the links do
(`sig_use_prompt`, `sig_race_prompt`).
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from PySide6.QtCore import QUrl, Signal
from PySide6.QtWidgets import QTextBrowser, QVBoxLayout, QWidget

from app.widgets import token_style as ts

COLOURS_SHOWN = (ts.ACCEPTED, ts.REJECTED, ts.RESAMPLED, ts.BONUS, ts.ASD_EXCEPTION, ts.TARGET)


@dataclass(frozen=True)
class ReadyPrompt:
    title: str
    prompt: str
    drafters: tuple[str, ...]
    k: int
    verify: str
    lesson: str


READY_PROMPTS = (
    ReadyPrompt(
        "Repetitive code: prompt lookup shines",
        "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
        "def mul(a, b):\n    return a * b\n\ndef add(",
        ("prompt-lookup",), 8, "greedy",
        "The continuation repeats spans of the prompt, so prompt lookup copies them: long blocks are accepted, "
        "many tokens per pass for almost no drafting cost. Watch tokens per pass climb towards K + 1."),
    ReadyPrompt(
        "Free prose: prompt lookup has little to copy",
        "A module is a file containing Python definitions and statements. When a module is imported, the",
        ("prompt-lookup",), 8, "greedy",
        "New prose rarely repeats the prompt: prompt lookup often proposes nothing (plain target steps, no "
        "colour) or proposes tokens that are rejected. Compare α and the speedup with the code prompt."),
    ReadyPrompt(
        "Free prose with a draft model",
        "A module is a file containing Python definitions and statements. When a module is imported, the",
        ("draft-model",), 4, "greedy",
        "A small model of the same family guesses the next words. It costs c per draft step; the theory "
        "explorer shows whether K = 4 pays off for the α it reaches."),
    ReadyPrompt(
        "Fallback chain: lookup first, then the draft model",
        "for i in range(10):\n    print(i * i)\nfor j in range(10):\n    print(j * j)\nfor i in",
        ("prompt-lookup", "draft-model"), 6, "greedy",
        "The cheap pattern drafter answers where it can; the draft model fills in when lookup has nothing. "
        "The α chart shows one colour per drafter."),
    ReadyPrompt(
        "Sampling stays lossless",
        "The for statement is used to iterate over the elements of a sequence, such as a string or a list, in",
        ("draft-model",), 4, "sample",
        "With temperature sampling a draft is kept with probability min(1, p/q). Step a pass and open the "
        "inspector: at a rejection the new token comes from the residual norm(max(0, p − q))."),
    ReadyPrompt(
        "ASD: a little regret for longer blocks",
        "A module is a file containing Python definitions and statements. When a module is imported, the",
        ("draft-model",), 6, "asd",
        "ASD accepts a few mismatches whose regret is small, within the budget B. Race it: the text differs "
        "from plain greedy decoding, and the race shows where."),
)


def _colour_rows() -> str:
    rows = []
    for name in COLOURS_SHOWN:
        look = ts.LOOKS[name]
        css = [f"color:{look.light}" if look.light else "",
               f"background-color:{look.tint_light}" if look.tint_light else "",
               "font-weight:bold" if look.bold else "", "font-style:italic" if look.italic else "",
               "text-decoration:line-through" if look.strike else ""]
        sample = f'<span style="{";".join(c for c in css if c)}">{html.escape(ts.LABELS[name])}</span>'
        rows.append(f"<tr><td>{sample}</td><td>{html.escape(ts.EXPLANATIONS[name])}</td></tr>")
    return "<table cellspacing='4'>" + "".join(rows) + "</table>"


def _prompt_rows() -> str:
    items = []
    for i, ready in enumerate(READY_PROMPTS):
        chain = " → ".join(ready.drafters)
        items.append(
            f"<li><b>{html.escape(ready.title)}</b> — <a href='use:{i}'>Use</a> · <a href='race:{i}'>Race</a><br>"
            f"<small>{html.escape(chain)}, K = {ready.k}, {ready.verify}</small><br>{html.escape(ready.lesson)}</li>")
    return "<ul>" + "".join(items) + "</ul>"


SECTIONS = (
    ("What you are looking at",
     "<p>A small <b>drafter</b> guesses K tokens; the large <b>target</b> checks all of them in <b>one</b> "
     "forward pass and keeps the longest prefix it agrees with, then adds one token of its own. One pass "
     "therefore commits between 1 and K + 1 tokens for the price of one target forward plus the drafting.</p>"),
    ("Colours in the text", "{colours}<p>Every colour also differs in style (weight, slant, underline, "
                            "strike-through), so the text reads the same in greyscale.</p>"),
    ("Step mode and the pass inspector",
     "<p>Switch on <b>Step mode</b> (toolbar), then Generate: the run waits before every pass. <b>Step</b> (F10) "
     "runs exactly one pass and opens it in the inspector; <b>Run</b> (F5) continues. Click any token to inspect "
     "its pass: the draft block, p (target) and q (drafter) per position, min(1, p/q) against the uniform draw "
     "u, the residual at a rejection, the ASD checks, and a paragraph in words.</p>"),
    ("The charts",
     "<ul><li><b>Acceptance α per pass</b>: accepted / tested positions (accepted + passes that ended in a "
     "rejection), the α of E(α, K), rolling and cumulative, per drafter; dotted, the acceptance rate accepted / "
     "drafted, which counts the untested drafts after a rejection and is lower.</li>"
     "<li><b>Tokens per pass vs E(α, K)</b>: what each pass committed against the i.i.d. theory.</li>"
     "<li><b>ASD regret ledger</b>: regret spent against the budget B; crosses mark exceptions.</li>"
     "<li><b>Throughput</b> in tokens/s, and the <b>estimated speedup</b> (tokens × one target forward / time; "
     "the race measures a real one) against the predicted E / (K c + 1) and E / (K c + v), v the measured "
     "verify cost.</li>"
     "<li>The <b>theory explorer</b> plots the formulas against α with this run's measured point, the acceptance "
     "at each draft position over the positions the target tested, beside the flat line the i.i.d. model "
     "predicts (falling bars: acceptance is not i.i.d.), and the best K for the measured α and c.</li></ul>"),
    ("The knobs",
     "<ul><li><b>Drafters</b>: draft model (a small model), prompt lookup (copies from the context), n-gram cache "
     "(counts what followed each n-gram), layer skip (the target's first layers). Several checked drafters form a "
     "fallback chain: the first that proposes something wins.</li>"
     "<li><b>K</b>: drafts per pass. Larger K wins more when α is high and costs more when it is low.</li>"
     "<li><b>Greedy</b>: keep a draft only if it is the target's argmax — the text equals plain greedy decoding."
     "</li><li><b>Sampling</b> (temperature, top-k, top-p applied to p and q alike): lossless speculative "
     "sampling — the text is distributed exactly as sampling from the target.</li>"
     "<li><b>ASD</b>: greedy, but a mismatch with a small regret may be kept, within a budget B per request, a "
     "gate g per unit of suffix and a cap M per block. B = 0 is strict greedy.</li></ul>"),
    ("The formulas",
     "<ul><li>Acceptance under sampling: keep x if u ≤ min(1, p(x) / q(x)); at the first rejection draw from "
     "norm(max(0, p − q)); if all K survive draw a bonus token from the next row of p.</li>"
     "<li>Expected tokens per pass: E(α, K) = (1 − α<sup>K+1</sup>) / (1 − α).</li>"
     "<li>Speedup: E(α, K) / (K c + 1), with c the draft time per drafted token over the time of one target "
     "forward of one token (timed as such, not the K + 1-token verification).</li>"
     "<li>ASD at position i of K: regret r<sub>i</sub> = z<sub>i</sub>[argmax] − z<sub>i</sub>[x<sub>i</sub>], "
     "suffix value q<sub>i</sub> = K − i; keep a mismatch if r<sub>i</sub>/q<sub>i</sub> ≤ g, mismatches so far "
     "≤ M and the block's regret fits in B − s.</li></ul>"),
    ("The race", "<p>The same prompt by plain decoding and by the current set-up, side by side. The two runs take "
                 "turns on this machine and each clock counts only its own work, so neither slows the other; the "
                 "view replays them in real time. Under greedy the texts must be identical.</p>"),
    ("Ready prompts", "{prompts}"),
)


def guide_html() -> str:
    parts = ["<h2>Speculative Decoding Playground — guide</h2>"]
    for title, body in SECTIONS:
        body = body.replace("{colours}", _colour_rows()).replace("{prompts}", _prompt_rows())
        parts.append(f"<h3>{html.escape(title)}</h3>{body}")
    return "".join(parts)


class GuidePanel(QWidget):
    sig_use_prompt = Signal(object)  # ReadyPrompt
    sig_race_prompt = Signal(object)  # ReadyPrompt

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.browser = QTextBrowser()
        self.browser.setOpenLinks(False)  # our links are commands, not pages
        self.browser.anchorClicked.connect(self.follow)
        self.browser.setHtml(guide_html())
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.browser)

    def follow(self, url: QUrl) -> None:
        """Handle a `use:N` or `race:N` link."""
        action, _, index = url.toString().partition(":")
        if not index.isdigit() or int(index) >= len(READY_PROMPTS):
            return
        ready = READY_PROMPTS[int(index)]
        if action == "use":
            self.sig_use_prompt.emit(ready)
        elif action == "race":
            self.sig_race_prompt.emit(ready)
