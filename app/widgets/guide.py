"""The in-app guide: what the colours, charts, knobs and formulas mean, and ready prompts that show contrasts.

A read-only help page (shown on first launch). The ready prompts come
first, right after a few lines on what the window shows; each has two links:
"Use" puts the prompt and its set-up into the window, "Race" also starts a
race against plain decoding. The window decides what the links do
(`sig_use_prompt`, `sig_race_prompt`). Every lesson is true of the bundled
models with the default settings (128 new tokens); `tests/widgets/test_ready_prompts.py`
checks each one. Then: why verifying K drafts costs about one forward (a
small diagram), the colours, every drafter the drafter panel offers, the
charts, the knobs and the formulas.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from PySide6.QtCore import QUrl, Signal
from PySide6.QtWidgets import QTextBrowser, QVBoxLayout, QWidget

from app.engine.drafters.registry import DRAFTER_LABELS
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


PROSE = ("Errors detected during execution are called exceptions and are not unconditionally fatal: "
         "you will soon learn how to")

READY_PROMPTS = (
    ReadyPrompt(
        "Repetitive code: prompt lookup shines",
        "import os\nimport sys\nimport re\nimport os\nimport sys\nimport re\nimport",
        ("prompt-lookup",), 8, "greedy",
        "The prompt repeats a pattern and so does the continuation: prompt lookup copies it, nearly every "
        "draft is accepted (α above 0.9) and a pass commits several tokens, more than half of K + 1 = 9, "
        "for almost no drafting cost."),
    ReadyPrompt(
        "Free prose: prompt lookup has little to copy, unless the text loops",
        PROSE,
        ("prompt-lookup",), 8, "greedy",
        "Fresh prose does not repeat its prompt: lookup mostly finds nothing to copy (plain target steps, no "
        "colour) and what it does propose is rejected; tokens per pass stay well below the code prompt's. Set "
        "the repetition penalty to 1.0 and run it again: this small model soon repeats itself, lookup copies "
        "its own loop and α climbs in the α chart. A lookup drafter is only as good as the repetition in the "
        "text."),
    ReadyPrompt(
        "Free prose with a draft model",
        PROSE,
        ("draft-model",), 4, "greedy",
        "A small model of the same family guesses the next words from the first pass on: it drafts in every "
        "pass (no plain steps) and reaches α near 0.7, with tokens per pass close to E(α, 4). Each draft "
        "step costs c; the theory explorer shows whether K = 4 pays off for the α it reaches."),
    ReadyPrompt(
        "Fallback chain: lookup first, then the draft model",
        "for i in range(10):\n    print(i * i)\nfor j in range(10):\n    print(j * j)\nfor i in",
        ("prompt-lookup", "draft-model"), 6, "greedy",
        "The cheap pattern drafter answers where it can; the draft model fills in when lookup has nothing, "
        "so both draft passes of this run. The α chart shows one colour per drafter."),
    ReadyPrompt(
        "Sampling stays lossless",
        "The for statement is used to iterate over the elements of a sequence, such as a string or a list, in",
        ("draft-model",), 4, "sample",
        "With temperature sampling a draft is kept when u ≤ min(1, p/q). Step a pass and open the "
        "inspector: at a rejection the new token comes from the residual norm(max(0, p − q)), and several "
        "passes of this run end that way."),
    ReadyPrompt(
        "ASD: a little regret for longer blocks",
        "A module is a file containing Python definitions and statements. When a module is imported, the",
        ("draft-model",), 6, "asd",
        "ASD accepts a few mismatches whose regret is small, within the budget B: on this prompt blocks get "
        "longer (more tokens per pass, fewer passes than greedy at the same K) and the text differs from plain "
        "greedy decoding — race it to see where. On other prompts the changed text can make blocks shorter: "
        "ASD trades exactness for acceptance, it does not guarantee it."),
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


def _bar(percent: int, colour: str, text: str = "") -> str:
    return f"<td width='{percent}%' bgcolor='{colour}' style='color:white'>{html.escape(text)}</td>"


def _forward_diagram() -> str:
    """One forward of 1 token against one of K + 1 = 5 tokens: the same weight reading, a little more arithmetic.

    Widths are shares of the page, each label above its bar, so the diagram narrows with the dock (a page
    wider than its dock would scroll sideways)."""
    rows = []
    for label, compute in (("plain step: 1 token", 2), ("verify K + 1 = 5 tokens", 10)):
        rows.append(f"<p>{label} ≈ 1 forward</p><table width='100%' cellspacing='0' cellpadding='2'><tr>"
                    f"{_bar(80, '#0072B2', 'read every weight from memory')}{_bar(compute, '#E69F00')}"
                    f"<td width='{20 - compute}%'></td></tr></table>")
    legend = ("<p><span style='color:#0072B2'>■</span> memory traffic (fixed) "
              "<span style='color:#E69F00'>■</span> arithmetic (grows with the tokens)</p>")
    return "".join(rows) + legend


DRAFTER_TEXT = {
    "draft-model": "a smaller model of the same family (same tokenizer) drafts K tokens, one forward each, "
                   "with its own cache; c is roughly its size relative to the target.",
    "prompt-lookup": "no model: finds the last few tokens earlier in the context and copies what followed them. "
                     "Free, strong when the text repeats (code edits, summaries), silent in fresh prose.",
    "ngram-cache": "no model: counts which token followed every n-gram so far and proposes the most frequent "
                   "successor, token by token. Votes across all earlier occurrences instead of copying one.",
    "suffix-tree": "no model (SuffixDecoding style): counts every short substring of this request and of this "
                   "session's earlier outputs, matches the longest recent suffix and drafts its most frequent "
                   "continuation, longer after longer matches. Learns across requests.",
    "layer-skip": "the target drafts for itself with only its first layers and its own head: no extra weights, "
                  "c ≈ layers used / all layers; works when the target was trained for early exit "
                  "(the bundled one was).",
    "medusa": "K small heads on the target's last hidden state, head k guessing the (k+1)-th next token, all in "
              "one step. Cheap, but later heads guess blind, so acceptance falls with the position.",
    "mtp": "multi-token prediction modules (DeepSeek-V3 style): each depth adds one transformer block on the "
           "previous depth's state and the token before it, so draft d sees drafts 1..d−1.",
    "eagle": "one decoder layer that runs autoregressively over the target's fused hidden features (EAGLE-3 "
             "flavour), feeding its own output back for later drafts; usually the most accurate head.",
    "dflash": "a block drafter in the spirit of block diffusion: one forward over [last token, MASK, …, MASK] "
              "predicts the whole block at once, so its cost per pass does not grow with K.",
}


def _drafter_rows() -> str:
    items = [f"<li><b>{html.escape(label)}</b> — {html.escape(DRAFTER_TEXT[name])}</li>"
             for name, label in DRAFTER_LABELS.items()]
    return ("<ul>" + "".join(items) + "</ul><p>The learned heads (Medusa, MTP, EAGLE, DFlash) are trained for one "
            "target and read its hidden states; the drafter panel lists them when the model folder has them "
            "(the bundled target has all four). Several checked drafters form a fallback chain: the first that "
            "proposes something drafts the pass.</p>")


SECTIONS = (
    ("What you are looking at",
     "<p>A small <b>drafter</b> guesses K tokens; the large <b>target</b> checks all of them in <b>one</b> "
     "forward pass and keeps the longest prefix it agrees with, then adds one token of its own. One pass "
     "therefore commits between 1 and K + 1 tokens for the price of one target forward plus the drafting. "
     "Start with a ready prompt below: <b>Use</b> sets it up, <b>Race</b> also races it against plain "
     "decoding.</p>"),
    ("Ready prompts", "{prompts}"),
    ("Why checking K tokens costs about one forward",
     "<p>To produce one token a model reads every one of its weights from memory once. For a 1-billion-"
     "parameter model in 16-bit that is 2 GB per forward, about 1 ms at a GPU's 2–3 TB/s, while the "
     "arithmetic for one token (about 2 operations per weight, 2 GFLOP) takes a few microseconds at hundreds "
     "of TFLOP/s. Decoding is <b>memory-bandwidth bound</b>: the chip mostly waits for weights. Scoring K + 1 "
     "tokens in the same forward reads the same weights once and only multiplies the small arithmetic part:</p>"
     "{diagram}"
     "<p>So verifying K drafts costs about one forward, and every accepted draft is a token that did not need "
     "a forward of its own. This is the assumption behind E(α, K) / (K c + 1). On a CPU, or with a large K or "
     "batch, the arithmetic starts to show: the theory explorer's <b>v</b> (the measured verify forward over "
     "a one-token forward) says how far this machine is from it.</p>"),
    ("Colours in the text", "{colours}<p>Every colour also differs in style (weight, slant, underline, "
                            "strike-through), so the text reads the same in greyscale.</p>"),
    ("Step mode and the pass inspector",
     "<p>Switch on <b>Step mode</b> (toolbar), then Generate: the run waits before every pass. <b>Step</b> (F10) "
     "runs exactly one pass and opens it in the inspector; <b>Run</b> (F5) continues. Click any token to inspect "
     "its pass (◀ / ▶ walk to the neighbouring passes): the draft block, p (target) and q (drafter) per "
     "position, under sampling min(1, p/q) against the uniform draw u on a 0–1 strip (kept when the dot lies "
     "left of the mark) and the residual at a rejection with the replacement token outlined, the ASD checks, "
     "and a paragraph in words.</p>"),
    ("In front of a class",
     "<p><b>Help → Guided lesson</b> runs ten steps live on the loaded models, from what a draft is to ASD's "
     "trade-off; each step's sentence is written from the pass it points at, which the window highlights. "
     "<b>View → Presentation mode</b> (F11) shows one large text and one large chart: Space runs the next pass, "
     "← / → walk the passes, 1–5 pick a chart, 0 the text alone, R one pass per line (View → One pass per line, "
     "Ctrl+R, in the normal window). Help → Keyboard shortcuts lists every key.</p>"),
    ("The charts",
     "<ul><li><b>Acceptance α per pass</b>: accepted / tested positions (accepted + passes that ended in a "
     "rejection), the α of E(α, K), rolling and cumulative, per drafter; dotted, the acceptance rate accepted / "
     "drafted, which counts the untested drafts after a rejection and is lower.</li>"
     "<li><b>Tokens per pass vs E(α, K)</b>: what each pass committed against the i.i.d. theory.</li>"
     "<li><b>ASD regret ledger</b>: regret spent against the budget B; crosses mark exceptions.</li>"
     "<li><b>Throughput</b> in tokens/s, and the <b>estimated speedup</b> (tokens × one target forward / time; "
     "the race measures a real one) against the predicted E / (K c + 1) and E / (K c + v), v the measured "
     "verify cost.</li>"
     "<li>The <b>theory explorer</b> plots the formulas against α: the family of E(α, K) curves for K = 1..8 "
     "(as in Leviathan et al.) with this run's K in bold and its measured point on it, the speedup, the "
     "optimal K against α for the chosen c, sliders for α and c, the acceptance "
     "at each draft position over the positions the target tested, beside the flat line the i.i.d. model "
     "predicts (falling bars: acceptance is not i.i.d.), and the best K for the measured α and c.</li></ul>"),
    ("The drafters", "{drafters}"),
    ("The knobs",
     "<ul><li><b>K</b>: drafts per pass. Larger K wins more when α is high and costs more when it is low.</li>"
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
     "suffix value v<sub>i</sub> = K − i; keep a mismatch if r<sub>i</sub>/v<sub>i</sub> ≤ g, mismatches so far "
     "≤ M and the block's regret fits in B − s.</li></ul>"),
    ("The race", "<p>The same prompt by plain decoding and by the current set-up, side by side. The two runs take "
                 "turns on this machine and each clock counts only its own work, so neither slows the other; the "
                 "view replays them in real time, each lane following its newest tokens, with tokens against "
                 "each clock and every speculative pass's draft and verify time. Under greedy the texts must be "
                 "identical.</p>"),
)


def guide_html() -> str:
    parts = ["<h2>Speculative Decoding Playground — guide</h2>"]
    for title, body in SECTIONS:
        body = (body.replace("{colours}", _colour_rows()).replace("{prompts}", _prompt_rows())
                .replace("{diagram}", _forward_diagram()).replace("{drafters}", _drafter_rows()))
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
