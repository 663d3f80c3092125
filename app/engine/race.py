"""Race: the same prompt by plain autoregressive decoding and by a speculative set-up, on one machine.

Two `SpeculativeDecoder`s share the loaded models (each has its own target
cache and drafters). Running them at the same time would let each slow the
other down, so the race steps them one at a time and gives each lane its own
clock that counts only the time spent inside that lane's generator. The lane
whose clock is behind always runs next, so both clocks advance together and
a view can replay the two streams in real time with little lag.

Under greedy (and under ASD with B = 0) the two texts must be identical in
exact arithmetic; ASD with B > 0 changes the text on purpose, sampling draws
differently, so the result reports where the token sequences first differ and
their token edit distance. Where identity is promised, `identity` says
"identical", or whether the first divergence was a numerical tie of the
target's top two logits (half precision rounds one-token and K+1-token
forwards differently) or a real mismatch (app/engine/core/identity.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from app.engine.core.fidelity import edit_distance, first_divergence
from app.engine.core.identity import Identity
from app.engine.events import AsdSummary, EndEvent, Event, RunningStats
from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings, RepetitionSettings

PLAIN = "plain"
SPECULATIVE = "speculative"
LANES = (PLAIN, SPECULATIVE)
# Levenshtein is O(n m); beyond this many cells the distance is not computed (reported as None).
EDIT_DISTANCE_CELLS = 4_000_000


@dataclass(frozen=True)
class RaceEvent:
    """One engine event of one lane, stamped with that lane's own clock."""

    lane: str
    event: Event
    clock_s: float  # the lane's compute time up to and including this event
    type: str = "race"


@dataclass(frozen=True)
class LaneResult:
    lane: str
    reason: str
    token_ids: tuple[int, ...]
    text: str
    passes: int
    wall_s: float  # the lane's own clock at its end
    error: str | None = None
    stats: RunningStats | None = None  # the lane's end figures (app/engine/core/stats.py)
    asd: AsdSummary | None = None  # ASD: exceptions, regret spent, reuse and passes saved (docs/ALGORITHMS.md §5.6)

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class RaceResult:
    plain: LaneResult
    speculative: LaneResult
    must_match: bool  # the rule promises identical texts (greedy, or ASD with B = 0)
    first_divergence: int | None  # first generated-token index where the two differ; None if identical
    edit_distance: int | None  # token-level Levenshtein distance; None if too long to compute
    type: str = "race_end"
    identity: Identity | None = None  # where identity is promised: identical, a numerical tie or a real mismatch

    @property
    def identical(self) -> bool:
        return self.first_divergence is None

    @property
    def speedup(self) -> float | None:
        """Measured speedup: plain wall time over speculative wall time, both really run."""
        return self.plain.wall_s / self.speculative.wall_s if self.speculative.wall_s > 0 else None


def baseline_settings(settings: DecodeSettings) -> DecodeSettings:
    """Plain decoding with the same length, seed and warping: no drafter, strict greedy for greedy and ASD."""
    return settings.with_changes(drafters=(), verify="greedy" if settings.is_greedy else "sample", adaptive_k=False)


def promises_identical(settings: DecodeSettings) -> bool:
    if settings.verify == "greedy":
        return True
    return settings.verify == "asd" and (settings.asd.budget == 0 or settings.asd.gate == 0 or settings.asd.cap == 0)


def token_edit_distance(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """Levenshtein distance in tokens; the common prefix and suffix are stripped first (they cost nothing)."""
    start = first_divergence(a, b)
    if start is None:
        return 0
    a, b = a[start:], b[start:]
    while a and b and a[-1] == b[-1]:
        a, b = a[:-1], b[:-1]
    if len(a) * len(b) > EDIT_DISTANCE_CELLS:
        return None
    return edit_distance(a, b)


class _Lane:
    """One generator and its own clock."""

    def __init__(self, name: str, events: Iterator[Event]) -> None:
        self.name = name
        self.events = events
        self.clock_s = 0.0
        self.end: EndEvent | None = None

    def advance(self) -> RaceEvent:
        started = time.perf_counter()
        try:
            event = next(self.events)
        finally:
            self.clock_s += time.perf_counter() - started
        if isinstance(event, EndEvent):
            self.end = event
        return RaceEvent(self.name, event, self.clock_s)

    def result(self) -> LaneResult:
        end = self.end
        assert end is not None, "a lane's result is read once its run has ended"
        return LaneResult(self.name, end.reason, end.token_ids, end.text, end.passes, self.clock_s, end.error,
                          end.stats, end.asd)


class Race:
    """Has the `generate` shape of `SpeculativeDecoder`, so the generation worker thread can run it."""

    def __init__(self, models) -> None:
        self.models = models

    def generate(self, prompt: str, live: LiveSettings | DecodeSettings, control: GenerationControl | None = None,
                 chat_template: bool = False) -> Iterator[RaceEvent | RaceResult]:
        """Validate now (raising like `SpeculativeDecoder.generate`), then stream the interleaved lanes."""
        from app.engine.decoding.decoder import SpeculativeDecoder  # here: the race's data types import without torch

        settings = live.get() if isinstance(live, LiveSettings) else live  # one set-up for the whole race
        control = control or GenerationControl()
        plain = SpeculativeDecoder(self.models)
        lanes = [
            _Lane(PLAIN, plain.generate(prompt, baseline_settings(settings), control, chat_template)),
            _Lane(SPECULATIVE, SpeculativeDecoder(self.models).generate(prompt, settings, control, chat_template)),
        ]
        return self._run(lanes, promises_identical(settings), plain.encode_prompt(prompt, chat_template),
                         settings.repetition)

    def _run(self, lanes: list[_Lane], must_match: bool, prompt_ids: list[int] | None = None,
             repetition: RepetitionSettings | None = None) -> Iterator[RaceEvent | RaceResult]:
        while any(lane.end is None for lane in lanes):
            behind = min((lane for lane in lanes if lane.end is None), key=lambda lane: lane.clock_s)
            yield behind.advance()
        plain, speculative = (lane.result() for lane in lanes)
        identity = self._identity(plain, speculative, prompt_ids, repetition) if must_match else None
        yield RaceResult(plain, speculative, must_match, first_divergence(plain.token_ids, speculative.token_ids),
                         token_edit_distance(plain.token_ids, speculative.token_ids), identity=identity)

    def _identity(self, plain: LaneResult, speculative: LaneResult, prompt_ids: list[int] | None,
                  repetition: RepetitionSettings | None = None) -> Identity | None:
        """Identical, or the first divergence judged on the target's logits after the plain lane's context."""
        from app.engine.core.identity import classify, logits_at

        if plain.error or speculative.error:
            return None
        a, b = plain.token_ids, speculative.token_ids
        index = first_divergence(a, b)
        logits = None
        if index is not None and index < min(len(a), len(b)) and prompt_ids is not None:
            logits = logits_at(self.models.target, list(prompt_ids) + list(a[:index]), repetition)  # (V,) on the host
        return classify(a, b, logits, self.models.dtype)
