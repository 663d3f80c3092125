"""Race view: plain autoregressive decoding against the current speculative set-up, side by side.

The race itself runs in the engine (`app.engine.race`) in a worker thread:
the two lanes take turns and each clock counts only its own work. This view
replays the two streams by those clocks in real time: at display time t it
shows each lane's events whose clock is <= t. While the race is still being
computed, t never passes the slower-known lane's clock (the "frontier"), so
neither lane is shown ahead of what has been measured; afterwards the
Replay button plays the finished race again from the start.

Each lane's text follows its newest tokens. Under the lanes, tokens against
each lane's clock (the steeper line is the faster decoder) and, per
speculative pass, its draft and verify time as stacked bars; the verdict
stands on a line of its own, with the details under it, above the lanes.

Under ASD the plain lane is strict greedy's output (ASD is greedy-based), so
once the race is shown the speculative lane marks its tokens that the
alignment with the plain lane (`app.engine.core.fidelity.changed_positions`) does
not match, underlines the first divergence and states the regret spent.
Greedy lanes must be identical and sampled lanes draw differently, so
neither is marked.
"""

from __future__ import annotations

import html
import math
import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, QTimer, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.engine.core.fidelity import changed_positions
from app.engine.events import ACCEPTED, ASD_EXCEPTION, AsdSummary, EndEvent, PassEvent, StartEvent
from app.engine.race import LANES, PLAIN, SPECULATIVE, RaceEvent, RaceResult
from app.widgets import token_style as ts

TICK_MS = 33
LANE_COLOURS = {PLAIN: "#7F7F7F", SPECULATIVE: "#0072B2"}
DRAFT_COLOUR, VERIFY_COLOUR = "#E69F00", "#0072B2"
LANE_TITLES = {PLAIN: "Plain autoregressive decoding (target only)", SPECULATIVE: "Speculative decoding"}
CHANGED_BACKGROUND = {False: "#ffe08a", True: "#6b5200"}  # light / dark theme: a token strict greedy did not emit
DIVERGENCE_COLOUR = "#D55E00"  # the underline of the first divergence
LINE_GLYPH, BAR_GLYPH = "━━", "▇"  # the race charts' keys
TITLE_SIZE = "10pt"  # as the run charts' titles


class RaceTimeline:
    """The race's events per lane, and which of them a replay has shown (no Qt)."""

    def __init__(self) -> None:
        self.events: dict[str, list[RaceEvent]] = {lane: [] for lane in LANES}
        self.ended: dict[str, bool] = {lane: False for lane in LANES}
        self.shown: dict[str, int] = {lane: 0 for lane in LANES}
        self.result: RaceResult | None = None

    def add(self, item: RaceEvent) -> None:
        self.events[item.lane].append(item)
        if isinstance(item.event, EndEvent):
            self.ended[item.lane] = True

    def frontier(self) -> float:
        """Display time up to which every lane's events are known."""
        clocks = [self._last_clock(lane) for lane in LANES if not self.ended[lane]]
        return min(clocks) if clocks else math.inf

    def _last_clock(self, lane: str) -> float:
        return self.events[lane][-1].clock_s if self.events[lane] else 0.0

    def due(self, lane: str, t: float) -> list[RaceEvent]:
        """Events of `lane` with clock <= t not shown yet; marks them shown."""
        events = self.events[lane]
        start = end = self.shown[lane]
        while end < len(events) and events[end].clock_s <= t:
            end += 1
        self.shown[lane] = end
        return events[start:end]

    def end_clock(self, lane: str) -> float | None:
        return self._last_clock(lane) if self.ended[lane] else None

    def all_shown(self) -> bool:
        return self.result is not None and all(self.shown[lane] == len(self.events[lane]) for lane in LANES)

    def rewind(self) -> None:
        self.shown = {lane: 0 for lane in LANES}


class LanePanel(QGroupBox):
    """One lane: its token stream (styled like the main view), clock and counters."""

    def __init__(self, lane: str, parent=None) -> None:
        super().__init__(LANE_TITLES[lane], parent)
        self.lane = lane
        self.stream = _LaneText()
        self.stream.setReadOnly(True)
        self.stream.setUndoRedoEnabled(False)
        # The text lays out after it is inserted: follow the newest tokens whenever the scroll range grows.
        self.stream.verticalScrollBar().rangeChanged.connect(lambda _low, _high: self.follow_newest())
        self.clock = QLabel()
        self.clock.setObjectName(f"{lane}Clock")
        self.diff_legend = QLabel()  # under ASD: what the marks in the text mean, and the regret spent
        self.diff_legend.setObjectName(f"{lane}DiffLegend")
        self.diff_legend.setWordWrap(True)
        self._dark = ts.is_dark(self.palette())
        self._formats = ts.make_formats(self._dark)
        column = QVBoxLayout(self)
        column.addWidget(self.stream, 1)
        column.addWidget(self.diff_legend)
        column.addWidget(self.clock)
        self.clear()

    def clear(self) -> None:
        self.stream.clear()
        self.stream.setExtraSelections([])
        self.diff_legend.clear()
        self.diff_legend.hide()
        self._cursor = QTextCursor(self.stream.document())
        self._spans: list[tuple[int, int]] = []  # (start, end) in the document of each generated token
        self._marks: list[int] = []  # the generated token of each extra selection
        self.tokens = 0
        self.passes = 0
        self.show_clock(0.0)

    def add(self, event) -> None:
        if isinstance(event, StartEvent):
            self._cursor.insertText(event.prompt_text, self._formats[ts.PROMPT])
        elif isinstance(event, PassEvent):
            self._add_pass(event)

    def _add_pass(self, event: PassEvent) -> None:
        self.passes += 1
        self.tokens += len(event.committed_ids)
        for token in event.drafted:
            if token.outcome in (ACCEPTED, ASD_EXCEPTION):
                self._insert_token(token.text, self._formats[token.outcome])
        if event.appended is not None:
            self._insert_token(event.appended.text, self._formats.get(event.appended.kind, self._formats[ts.TARGET]))
        self.follow_newest()

    def _insert_token(self, text: str, style: QTextCharFormat) -> None:
        start = self._cursor.position()
        self._cursor.insertText(text, style)
        self._spans.append((start, self._cursor.position()))

    def token_span(self, t: int) -> tuple[int, int]:
        """Where generated token t lies in the lane's document: (start, end) character positions."""
        return self._spans[t]

    def mark_diff(self, changed: list[int], first: int | None, legend: str) -> None:
        """Give the generated tokens at `changed` a background, underline token `first`, show `legend`."""
        self._marks = list(changed)  # the token of each extra selection, in order
        selections = [self._selection(t, background=QColor(CHANGED_BACKGROUND[self._dark])) for t in changed]
        if first is not None and first < len(self._spans):
            self._marks.append(first)
            selections.append(self._selection(first, underline=True))
        self.stream.setExtraSelections(selections)
        self.diff_legend.setText(legend)
        self.diff_legend.show()

    def _selection(self, t: int, background: QColor | None = None, underline: bool = False) -> QTextEdit.ExtraSelection:
        start, end = self._spans[t]
        selection = QTextEdit.ExtraSelection()
        selection.cursor = QTextCursor(self.stream.document())
        selection.cursor.setPosition(start)
        selection.cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        if background is not None:
            selection.format.setBackground(background)
        if underline:
            selection.format.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
            selection.format.setUnderlineColor(QColor(DIVERGENCE_COLOUR))
            selection.format.setFontUnderline(True)
        return selection

    def highlighted_tokens(self) -> list[int]:
        """The generated tokens shown with a changed-token background (each selection covers its token's span)."""
        return self._marked(lambda f: f.hasProperty(QTextCharFormat.Property.BackgroundBrush))

    def underlined_token(self) -> int | None:
        """The generated token underlined as the first divergence, if any."""
        marked = self._marked(lambda f: f.fontUnderline())
        return marked[0] if marked else None

    def _marked(self, test) -> list[int]:
        selections = self.stream.extraSelections()
        if len(selections) != len(self._marks):  # cleared since
            return []
        found = []
        for t, selection in zip(self._marks, selections, strict=True):
            assert (selection.cursor.selectionStart(), selection.cursor.selectionEnd()) == self._spans[t]
            if test(selection.format):
                found.append(t)
        return sorted(found)

    def follow_newest(self) -> None:
        """Scroll so the newest tokens show."""
        bar = self.stream.verticalScrollBar()
        bar.setValue(bar.maximum())

    def show_clock(self, seconds: float) -> None:
        rate = self.tokens / seconds if seconds > 0 else 0.0
        self.clock.setText(f"{seconds:6.2f} s · {self.tokens} tokens · {self.passes} passes · {rate:.1f} tokens/s")

    @property
    def text(self) -> str:
        return self.stream.toPlainText()


class _LaneText(QPlainTextEdit):
    """A lane's token text: it wishes for no more than its minimum height, so in a scrolling dock the lanes
    share what is left and the charts stay in view. Its preferred height is that minimum, not nothing (an
    Ignored policy): the scroll area sizes the view by its preferred height for its width, which then fell
    short of the minimum, and the lane's word-wrapped note (`LanePanel.diff_legend`) was drawn over the text."""

    MIN_HEIGHT = 80

    def __init__(self) -> None:
        super().__init__()
        self.setMinimumHeight(self.MIN_HEIGHT)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self.MIN_HEIGHT)


class RaceCharts(pg.GraphicsLayoutWidget):
    """Tokens against each lane's clock, and the speculative lane's draft / verify time per pass."""

    MIN_HEIGHT = 120

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setBackground(None)
        self.setMinimumHeight(self.MIN_HEIGHT)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        # Each plot's key is in its title, never over its data: the plots are a few lines high.
        self.keys = {"progress": [(LANE_COLOURS[lane], LINE_GLYPH, lane) for lane in LANES],
                     "timing": [(DRAFT_COLOUR, BAR_GLYPH, "draft"), (VERIFY_COLOUR, BAR_GLYPH, "verify")]}
        self.progress = self.addPlot(row=0, col=0)
        self.progress.setTitle(keyed_title("Tokens against each lane's own clock", self.keys["progress"]),
                               size=TITLE_SIZE)
        self.progress.setLabel("bottom", "s")
        self.progress.setLabel("left", "tokens")
        self.progress.showGrid(x=True, y=True, alpha=0.2)
        self.curves = {lane: self.progress.plot(pen=pg.mkPen(LANE_COLOURS[lane], width=2)) for lane in LANES}
        self.timing = self.addPlot(row=0, col=1)
        self.timing.setTitle(keyed_title("Time per speculative pass", self.keys["timing"]), size=TITLE_SIZE)
        self.timing.setLabel("bottom", "pass")
        self.timing.setLabel("left", "ms")
        self.draft_bars = pg.BarGraphItem(x=[], y0=[], height=[], width=0.8, brush=DRAFT_COLOUR)
        self.verify_bars = pg.BarGraphItem(x=[], y0=[], height=[], width=0.8, brush=VERIFY_COLOUR)
        for bars in (self.draft_bars, self.verify_bars):
            self.timing.addItem(bars)
        self.reset()

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self.MIN_HEIGHT)  # as the lanes' text: no wish beyond its minimum

    def reset(self) -> None:  # not clear(): GraphicsLayoutWidget binds that name to its layout's clear
        self.points: dict[str, list[tuple[float, int]]] = {lane: [(0.0, 0)] for lane in LANES}
        self.pass_ms: list[tuple[float, float]] = []  # (draft, verify) per speculative pass
        self.redraw()

    def add_pass(self, lane: str, clock_s: float, tokens: int, event: PassEvent) -> None:
        self.points[lane].append((clock_s, tokens))
        if lane == SPECULATIVE:
            self.pass_ms.append((event.timing.draft_ms, event.timing.verify_ms))

    def redraw(self) -> None:
        for lane, curve in self.curves.items():
            t, tokens = zip(*self.points[lane], strict=True)
            curve.setData(list(t), list(tokens))
        x = np.arange(1, len(self.pass_ms) + 1, dtype=float)
        draft = np.array([d for d, _v in self.pass_ms], dtype=float)
        verify = np.array([v for _d, v in self.pass_ms], dtype=float)
        self.draft_bars.setOpts(x=x, y0=np.zeros_like(draft), height=draft, width=0.8)
        self.verify_bars.setOpts(x=x, y0=draft, height=verify, width=0.8)

    def series(self, lane: str) -> list[tuple[float, int]]:
        """The (clock, tokens) points drawn for a lane (for tests)."""
        return list(self.points[lane])


class RaceView(QWidget):
    sig_start_requested = Signal()  # the window starts a race with the current prompt and settings
    sig_stop_requested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.timeline = RaceTimeline()
        self.error: str | None = None
        self._replay_started = 0.0
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self.tick)
        self.start_button = QPushButton("Race")
        self.start_button.setToolTip("Decode the prompt plainly and with the current speculative set-up, side by side")
        self.stop_button = QPushButton("Stop")
        self.replay_button = QPushButton("Replay")
        self.start_button.clicked.connect(self.sig_start_requested)
        self.stop_button.clicked.connect(self.sig_stop_requested)
        self.replay_button.clicked.connect(self.replay)
        self.lanes = {lane: LanePanel(lane) for lane in LANES}
        self.charts = RaceCharts()
        self.setup = QLabel()
        self.setup.setWordWrap(True)
        self.headline = QLabel()
        self.headline.setObjectName("raceHeadline")
        self.headline.setStyleSheet("font-weight: bold; font-size: 120%;")
        self.headline.setWordWrap(True)
        self.verdict = QLabel("Each lane has its own clock that counts only its own work: the two runs take turns "
                              "on this machine and are replayed here in real time.")
        self.verdict.setWordWrap(True)
        self.verdict.setObjectName("raceVerdict")
        self.verdict.setMinimumHeight(3 * self.verdict.fontMetrics().lineSpacing())  # never squashed by the lanes
        self._layout()
        self.set_running(False)

    def _layout(self) -> None:
        buttons = QHBoxLayout()
        for button in (self.start_button, self.stop_button, self.replay_button):
            buttons.addWidget(button)
        buttons.addWidget(self.setup, 1)
        lanes = QHBoxLayout()
        for panel in self.lanes.values():
            lanes.addWidget(panel, 1)
        column = QVBoxLayout(self)
        column.addLayout(buttons)
        column.addWidget(self.headline)  # the verdict first: it must show without scrolling
        column.addWidget(self.verdict)
        column.addLayout(lanes, 1)
        column.addWidget(self.charts, 1)

    def set_running(self, running: bool) -> None:
        self._running = running
        self.start_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.replay_button.setEnabled(not running and self.timeline.result is not None)

    # --- feeding --------------------------------------------------------------------------------
    def begin(self, description: str) -> None:
        """A race starts: forget the previous one and replay the new one as it comes."""
        self.timeline = RaceTimeline()
        self.error = None
        self.setup.setText(html.escape(description))
        self.headline.setText("Racing…")
        self.verdict.setText("")
        self.lanes[SPECULATIVE].setTitle(f"{LANE_TITLES[SPECULATIVE]}: {description}")
        self._restart_replay()
        self.set_running(True)

    def on_event(self, item) -> None:
        if isinstance(item, RaceEvent):
            self.timeline.add(item)
        elif isinstance(item, RaceResult):
            self.timeline.result = item
        elif isinstance(item, EndEvent):  # the worker's failure event: the race could not run
            self.error = item.error or item.reason
            self.headline.setText("The race failed")
            self.verdict.setText(f"The race failed — {item.error_type or 'error'}: {self.error}")

    def finished(self) -> None:
        """The race thread ended; the replay keeps playing until every event was shown."""
        self.set_running(False)
        if not self._timer.isActive():
            self._timer.start()

    # --- replay ---------------------------------------------------------------------------------
    def replay(self) -> None:
        if self.timeline.result is not None:
            self._restart_replay()

    def _restart_replay(self) -> None:
        self.timeline.rewind()
        for panel in self.lanes.values():
            panel.clear()
        self.charts.reset()
        self._replay_started = time.monotonic()
        self._timer.start()

    @property
    def replaying(self) -> bool:
        return self._timer.isActive()

    def tick(self) -> None:
        t = min(time.monotonic() - self._replay_started, self.timeline.frontier())
        for lane, panel in self.lanes.items():
            for item in self.timeline.due(lane, t):
                panel.add(item.event)
                if isinstance(item.event, PassEvent):
                    self.charts.add_pass(lane, item.clock_s, panel.tokens, item.event)
            end = self.timeline.end_clock(lane)
            panel.show_clock(t if end is None else min(t, end))
        self.charts.redraw()
        failed = not self._running and self.timeline.result is None  # the thread ended without a result
        if self.timeline.all_shown() or failed:
            self._timer.stop()
            self._show_result()

    def _show_result(self) -> None:
        result = self.timeline.result
        if result is None:
            return
        for lane in LANES:
            self.lanes[lane].show_clock(self.timeline.end_clock(lane) or 0.0)
        self.headline.setText(verdict_line(result))
        self.verdict.setText(result_text(result))
        asd = result.speculative.asd
        if asd is not None and not any(lane.reason == "error" for lane in (result.plain, result.speculative)):
            plain, spec = result.plain.token_ids, result.speculative.token_ids
            changed = changed_positions(spec, plain)
            self.lanes[SPECULATIVE].mark_diff(changed, result.first_divergence, diff_legend(result, changed, asd))

    def lane_text(self, lane: str) -> str:
        return self.lanes[lane].text


def keyed_title(title: str, entries: list[tuple[str, str, str]]) -> str:
    """A plot's title followed by its key: a coloured glyph and a name per (colour, glyph, name)."""
    key = "&nbsp;&nbsp;".join(f"<span style='color:{colour}'>{glyph}</span>&nbsp;{html.escape(name)}"
                              for colour, glyph, name in entries)
    return f"{html.escape(title)}&nbsp;&nbsp;&nbsp;{key}"


def verdict_line(result: RaceResult) -> str:
    """Who won, in one line: the measured speedup of two real runs."""
    speedup = result.speedup
    if speedup is None or any(lane.reason == "error" for lane in (result.plain, result.speculative)):
        return "No verdict: a lane did not finish."
    if speedup >= 1:
        return f"Speculative decoding won: {speedup:.2f}× faster than plain decoding (measured)."
    return f"Plain decoding won: speculative decoding was {1 / speedup:.2f}× slower (measured)."


def result_text(result: RaceResult) -> str:
    """The race's outcome in words: who won by how much, and whether the texts agree."""
    plain, spec = result.plain, result.speculative
    lines = []
    for lane in (plain, spec):
        if lane.reason == "error":
            lines.append(f"The {lane.lane} run failed: {lane.error}.")
    speedup = result.speedup
    if speedup is not None:
        faster = "faster" if speedup >= 1 else "slower"
        factor = speedup if speedup >= 1 else 1 / speedup
        lines.append(f"Measured speedup {speedup:.2f}×: speculative decoding was {factor:.2f}× {faster} than "
                     f"plain decoding ({spec.wall_s:.2f} s vs {plain.wall_s:.2f} s; {spec.tokens_per_s:.1f} vs "
                     f"{plain.tokens_per_s:.1f} tokens/s; {spec.passes} vs {plain.passes} target passes).")
    lines.append(_acceptance_text(spec))
    lines.append(_agreement_text(result))
    lines.append(_asd_text(spec))
    return " ".join(line for line in lines if line)


def diff_legend(result: RaceResult, changed: list[int], asd: AsdSummary) -> str:
    """The ASD lane's legend: what the marks mean, where the texts first part, and the regret spent (rich text)."""
    colour = CHANGED_BACKGROUND[False]
    regret = f"Regret spent {asd.spent:.3g} of {_budget(asd)} on {asd.exceptions} exception" \
             f"{'' if asd.exceptions == 1 else 's'}."
    first = result.first_divergence
    if first is None:
        return f"Identical to strict greedy (the plain lane), token for token. {regret}"
    spec_len = len(result.speculative.token_ids)
    where = (f"<span style='color:{DIVERGENCE_COLOUR}'>⟂</span> first divergence at generated token {first + 1}"
             + (" (underlined)" if first < spec_len else " (where this lane ends)"))
    return (f"<span style='background:{colour}; color:black'>&nbsp;highlighted&nbsp;</span> = {len(changed)} "
            f"token{'' if len(changed) == 1 else 's'} that differ from strict greedy (the plain lane); "
            f"{where}. {regret}")


def _budget(asd: AsdSummary) -> str:
    return "an unbounded budget" if asd.budget == float("inf") else f"B = {asd.budget:.3g}"


def _acceptance_text(lane) -> str:
    """The speculative lane's α, acceptance rate and tokens per pass against E(α, K) (app/engine/core/stats.py)."""
    stats = lane.stats
    if stats is None or stats.alpha is None:
        return ""
    rate, expected = stats.acceptance_rate, stats.expected_tokens_per_pass
    rate = "" if rate is None else f", acceptance rate (accepted / drafted) {rate:.2f}"
    expected = "" if expected is None else f" against E(α, K) = {expected:.2f}"
    return (f"α = {stats.alpha:.2f} (accepted / tested){rate}; {stats.tokens_per_pass:.2f} tokens per pass"
            f"{expected}.")


def _asd_text(lane) -> str:
    """What ASD spent and bought in the speculative lane (docs/ALGORITHMS.md §5.6)."""
    asd = lane.asd
    if asd is None:
        return ""
    return (f"ASD spent regret {asd.spent:.3g} of {_budget(asd)} on {asd.exceptions} exception"
            f"{'' if asd.exceptions == 1 else 's'}, reused {asd.reused} greedy token"
            f"{'' if asd.reused == 1 else 's'} after them, and kept {asd.saved} more than strict greedy would on the "
            f"same passes (about {asd.passes_saved:.1f} passes saved).")


def _agreement_text(result: RaceResult) -> str:
    total = max(len(result.plain.token_ids), len(result.speculative.token_ids))
    if result.identical:
        why = " — as this verification rule guarantees." if result.must_match else "."
        return f"The two texts are identical, token for token ({total} tokens){why}"
    distance = "too long to compare" if result.edit_distance is None else f"{result.edit_distance}"
    where = (f"The texts first differ at generated token {result.first_divergence + 1} "
             f"(token edit distance {distance} over {total} tokens).")
    if result.must_match:
        identity = result.identity
        if identity is not None and identity.outcome == "tie":
            return (where + f" This rule promises identical text in exact arithmetic; here they {identity}: the "
                    "target's two best tokens were equal within the rounding of its dtype, and verifying K + 1 "
                    "tokens at once rounds differently from one at a time.")
        if identity is not None:
            return where + f" This rule promises identical text; here they {identity}: worth reporting."
        return where + " They should be identical under this rule: floating-point ties can cause this."
    if result.speculative.asd is not None:
        return where + " ASD with B > 0 spends regret on purpose: the plain lane is strict greedy, and the " \
                       "speculative lane highlights the tokens that differ from it."
    return where + " Sampling does not promise identical text: the two lanes draw differently, so they are " \
                   "not comparable token by token and nothing is highlighted."
