"""Settings of one generation: frozen, validated plain data.

A `DecodeSettings` value never changes; the window replaces the whole value in
a `LiveSettings` holder and the decoder reads the holder once per pass, so a
change applies from the next pass on. `GenerationControl` carries the stop,
pause and single-step requests that the decoder checks between passes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Literal, get_args

VerifyRule = Literal["greedy", "sample", "asd"]
VERIFY_RULES: tuple[VerifyRule, ...] = get_args(VerifyRule)
NO_DRAFTER = "none"
MAX_K = 64
MAX_TREE_NODES = 256


class SettingsError(ValueError):
    """A setting a user typed is out of range; the message says what is allowed."""


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise SettingsError(message)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SamplingSettings:
    """Warping applied identically to target and drafter logits (sample rule)."""

    temperature: float = 1.0
    top_k: int = 0  # 0 = no top-k filter
    top_p: float = 1.0

    def __post_init__(self) -> None:
        _require(_is_number(self.temperature) and self.temperature > 0,
                 f"temperature must be a number > 0 (got {self.temperature!r}); use the greedy rule for temperature 0")
        _require(_is_int(self.top_k) and self.top_k >= 0,
                 f"top-k must be a whole number >= 0, 0 meaning off (got {self.top_k!r})")
        _require(_is_number(self.top_p) and 0 < self.top_p <= 1,
                 f"top-p must be in (0, 1] (got {self.top_p!r})")


@dataclass(frozen=True)
class RepetitionSettings:
    """Repetition controls applied to target and drafter logits alike, before any warping, under every rule.

    Hugging Face's semantics (docs/ALGORITHMS.md §4.5; computed in app/engine/core/repetition.py).
    """

    penalty: float = 1.0  # logits of tokens already in the context: < 0 times penalty, else over it; 1.0 = off
    no_repeat_ngram: int = 0  # ban every token that would repeat an n-gram of the context; 0 = off

    def __post_init__(self) -> None:
        _require(_is_number(self.penalty) and self.penalty > 0,
                 f"repetition penalty must be a number > 0, 1.0 meaning off (got {self.penalty!r}); "
                 "above 1 discourages repeats")
        _require(_is_int(self.no_repeat_ngram) and self.no_repeat_ngram >= 0,
                 f"no-repeat n-gram size must be a whole number >= 0, 0 meaning off (got {self.no_repeat_ngram!r})")

    @property
    def active(self) -> bool:
        return self.penalty != 1.0 or self.no_repeat_ngram > 0

    def describe(self) -> str:
        """In words, e.g. "repetition penalty 1.2 and no repeated 3-grams"; "" when both are off."""
        parts = ([f"repetition penalty {self.penalty:g}"] if self.penalty != 1.0 else []) + \
            ([f"no repeated {self.no_repeat_ngram}-grams"] if self.no_repeat_ngram else [])
        return " and ".join(parts)


@dataclass(frozen=True)
class AsdSettings:
    """Approximate Speculative Decoding knobs (docs/ALGORITHMS.md §5)."""

    budget: float = 8.0  # B: regret the whole request may spend; math.inf = unbounded (gate and cap still apply)
    gate: float = 0.25  # g: largest regret per unit of suffix value
    cap: int = 2  # M: most accepted mismatches in one block

    def __post_init__(self) -> None:
        _require((_is_number(self.budget) or self.budget == math.inf) and self.budget >= 0,
                 f"ASD budget B must be a number >= 0 or inf for unbounded (got {self.budget!r})")
        _require(_is_number(self.gate) and self.gate >= 0, f"ASD gate g must be a number >= 0 (got {self.gate!r})")
        _require(_is_int(self.cap) and self.cap >= 0, f"ASD block cap M must be a whole number >= 0 (got {self.cap!r})")

    def strict_greedy_reason(self) -> str | None:
        """Why these knobs let no mismatch through, so ASD runs as strict greedy (§5.5), or None when some may
        pass. They are allowed (the limit is worth showing), but a user who set them should know."""
        reasons = [why for zero, why in ((self.budget == 0, "B = 0 leaves no budget to spend"),
                                         (self.gate == 0, "g = 0 lets no regret through the gate"),
                                         (self.cap == 0, "M = 0 allows no mismatch in a block")) if zero]
        if not reasons:
            return None
        return f"{'; '.join(reasons)}: ASD accepts no mismatch and runs as strict greedy."


@dataclass(frozen=True)
class DrafterOptions:
    """Per-drafter knobs; each drafter reads only its own."""

    lookup_max_ngram: int = 3
    lookup_min_ngram: int = 1
    ngram_max_n: int = 4
    ngram_min_n: int = 1
    ngram_min_count: int = 1
    ngram_min_share: float = 0.0
    suffix_max_depth: int = 32  # suffix tree: longest substring kept (matched pattern + speculation)
    suffix_spec_factor: float = 2.0  # suffix tree: α, at most ⌊α·m⌋ drafts after an m-token match
    suffix_min_prob: float = 0.1  # suffix tree: least path frequency of a drafted node
    layer_skip_exit: int | None = None  # first E layers; None = the model's recommended exit
    layer_skip_layers: tuple[int, ...] | None = None  # explicit subset instead of the first E

    def __post_init__(self) -> None:
        for name in ("lookup_max_ngram", "lookup_min_ngram", "ngram_max_n", "ngram_min_n", "ngram_min_count"):
            value = getattr(self, name)
            _require(_is_int(value) and value >= 1,
                     f"{name.replace('_', ' ')} must be a whole number >= 1 (got {value!r})")
        _require(self.lookup_min_ngram <= self.lookup_max_ngram, "prompt lookup: min n-gram must not exceed max n-gram")
        _require(self.ngram_min_n <= self.ngram_max_n, "n-gram cache: min n must not exceed max n")
        _require(_is_number(self.ngram_min_share) and 0 <= self.ngram_min_share <= 1,
                 f"n-gram cache: min share must be in [0, 1] (got {self.ngram_min_share!r})")
        _require(_is_int(self.suffix_max_depth) and self.suffix_max_depth >= 2,
                 f"suffix tree: max depth must be a whole number >= 2 (got {self.suffix_max_depth!r})")
        _require(_is_number(self.suffix_spec_factor) and self.suffix_spec_factor > 0,
                 f"suffix tree: the speculation factor must be a number > 0 (got {self.suffix_spec_factor!r})")
        _require(_is_number(self.suffix_min_prob) and 0 <= self.suffix_min_prob <= 1,
                 f"suffix tree: min probability must be in [0, 1] (got {self.suffix_min_prob!r})")
        _require(self.layer_skip_exit is None or (_is_int(self.layer_skip_exit) and self.layer_skip_exit >= 1),
                 f"layer skip: exit layer must be a whole number >= 1 (got {self.layer_skip_exit!r})")
        if self.layer_skip_layers is not None:
            layers = self.layer_skip_layers
            _require(len(layers) > 0 and all(_is_int(i) and i >= 0 for i in layers),
                     "layer skip: the layer subset must be a non-empty list of layer indices >= 0")
            _require(list(layers) == sorted(set(layers)) and layers[0] == 0,
                     "layer skip: the layer subset must be increasing and start with layer 0")


@dataclass(frozen=True)
class DecodeSettings:
    """Everything the pass loop reads at a pass boundary."""

    drafters: tuple[str, ...] = ("draft-model",)  # fallback chain, first that proposes wins
    k: int = 4
    adaptive_k: bool = False
    k_min: int = 1
    k_max: int = 16
    verify: VerifyRule = "greedy"
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    repetition: RepetitionSettings = field(default_factory=RepetitionSettings)
    asd: AsdSettings = field(default_factory=AsdSettings)
    options: DrafterOptions = field(default_factory=DrafterOptions)
    max_new_tokens: int = 128
    seed: int = 0
    tree: int | None = None  # token trees: node budget N (K is then the depth limit); None = a chain

    def __post_init__(self) -> None:
        chain = tuple(name for name in self.drafters if name != NO_DRAFTER)
        object.__setattr__(self, "drafters", chain)
        _require(len(set(chain)) == len(chain), f"a drafter appears twice in the chain {list(chain)}")
        _require(_is_int(self.k) and 1 <= self.k <= MAX_K,
                 f"K must be a whole number from 1 to {MAX_K} (got {self.k!r})")
        _require(_is_int(self.k_min) and _is_int(self.k_max) and 1 <= self.k_min <= self.k_max <= MAX_K,
                 f"adaptive K bounds must satisfy 1 <= min <= max <= {MAX_K} (got {self.k_min!r}, {self.k_max!r})")
        _require(self.verify in VERIFY_RULES,
                 f"unknown verification rule {self.verify!r}; choose one of {', '.join(VERIFY_RULES)}")
        _require(_is_int(self.max_new_tokens) and self.max_new_tokens >= 1,
                 f"max new tokens must be a whole number >= 1 (got {self.max_new_tokens!r})")
        _require(_is_int(self.seed) and self.seed >= 0, f"seed must be a whole number >= 0 (got {self.seed!r})")
        _require(self.tree is None or (_is_int(self.tree) and 1 <= self.tree <= MAX_TREE_NODES),
                 f"the tree's node budget must be a whole number from 1 to {MAX_TREE_NODES} (got {self.tree!r})")
        _require(self.tree is None or self.verify != "asd",
                 "ASD verification is a chain rule (its regret ledger follows one line of drafts): switch the "
                 "token tree off, or verify the tree with the greedy or sample rule")

    @property
    def is_greedy(self) -> bool:
        return self.verify in ("greedy", "asd")

    def with_changes(self, **changes) -> DecodeSettings:
        """A validated copy; nested groups accept a dict of their own fields."""
        for group in GROUPS:
            if isinstance(changes.get(group), dict):
                changes[group] = replace(getattr(self, group), **changes[group])
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return _as_plain(self)


GROUPS = {"sampling": SamplingSettings, "repetition": RepetitionSettings, "asd": AsdSettings,
          "options": DrafterOptions}  # the nested settings groups, by field name


def _as_plain(value):
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _as_plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple):
        return [_as_plain(v) for v in value]
    return value


def settings_from_dict(data: dict) -> DecodeSettings:
    """Inverse of `DecodeSettings.to_dict` (unknown keys are a SettingsError)."""
    known = {f.name for f in fields(DecodeSettings)}
    unknown = set(data) - known
    _require(not unknown, f"unknown settings: {', '.join(sorted(unknown))}")
    plain = dict(data)
    for name, cls in GROUPS.items():
        if name in plain:
            plain[name] = cls(**plain[name])
    if "drafters" in plain:
        plain["drafters"] = tuple(plain["drafters"])
    if plain.get("options") is not None and plain["options"].layer_skip_layers is not None:
        plain["options"] = replace(plain["options"], layer_skip_layers=tuple(plain["options"].layer_skip_layers))
    return DecodeSettings(**plain)


class Watched:
    """Callbacks told after every change, on the thread that made it and outside any lock of the value: how a
    copy in an engine process is kept in step (app/engine/remote.py pushes each change down its pipe)."""

    def __init__(self) -> None:
        self._watchers: list[Callable[[], None]] = []
        self._watchers_lock = threading.Lock()

    def watch(self, changed: Callable[[], None]) -> Callable[[], None]:
        """Call `changed()` after every change from now on; returns the call that stops it."""
        with self._watchers_lock:
            self._watchers.append(changed)

        def unwatch() -> None:
            with self._watchers_lock:
                if changed in self._watchers:
                    self._watchers.remove(changed)
        return unwatch

    def _changed(self) -> None:
        with self._watchers_lock:
            watchers = list(self._watchers)
        for changed in watchers:
            changed()


class LiveSettings(Watched):
    """Thread-safe holder of the current settings; written by the window, read per pass."""

    def __init__(self, settings: DecodeSettings | None = None) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._settings = settings or DecodeSettings()

    def get(self) -> DecodeSettings:
        with self._lock:
            return self._settings

    def set(self, settings: DecodeSettings) -> None:
        with self._lock:
            self._settings = settings
        self._changed()

    def update(self, **changes) -> DecodeSettings:
        """Apply changes atomically; raises SettingsError and keeps the old value if invalid."""
        with self._lock:
            self._settings = updated = self._settings.with_changes(**changes)
        self._changed()
        return updated


@dataclass(frozen=True)
class ControlRequests:
    """What a GenerationControl has been asked so far, as plain data that can cross to another process."""

    stopped: bool = False
    paused: bool = False
    steps_granted: int = 0
    min_pass_interval_s: float = 0.0  # slow motion: at least this long between the starts of two passes


class GenerationControl(Watched):
    """Stop / pause / single-step / slow-motion requests, checked by the decoder between passes."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()
        self._stop = False
        self._paused = False
        self._steps = 0  # steps granted and not yet taken
        self._granted = 0  # steps ever granted: lets another control follow this one
        self._min_interval = 0.0  # seconds between the starts of two passes (0 = full speed)
        self._last_turn: float | None = None  # time.monotonic() of the last turn given

    def set_min_pass_interval(self, seconds: float) -> None:
        """Slow motion: let at most one pass start per `seconds` (0 = full speed); read at the next turn."""
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise SettingsError(f"The pass interval must be a finite number of seconds >= 0, not {seconds!r}.")
        with self._cond:
            self._min_interval = float(seconds)
            self._cond.notify_all()
        self._changed()

    @property
    def min_pass_interval(self) -> float:
        with self._cond:
            return self._min_interval

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._changed()

    def pause(self) -> None:
        with self._cond:
            self._paused = True
        self._changed()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()
        self._changed()

    def step(self) -> None:
        """Allow exactly one more pass while paused."""
        with self._cond:
            self._paused = True
            self._steps += 1
            self._granted += 1
            self._cond.notify_all()
        self._changed()

    def requests(self) -> ControlRequests:
        """What has been asked of this control so far, as plain data."""
        with self._cond:
            return ControlRequests(stopped=self._stop, paused=self._paused, steps_granted=self._granted,
                                   min_pass_interval_s=self._min_interval)

    def follow(self, wanted: ControlRequests) -> None:
        """Catch up with another control's requests (a control in another process mirrors the window's)."""
        with self._cond:
            self._steps += max(0, wanted.steps_granted - self._granted)
            self._granted = max(self._granted, wanted.steps_granted)
            self._paused = wanted.paused
            self._stop = self._stop or wanted.stopped
            self._min_interval = wanted.min_pass_interval_s
            self._cond.notify_all()
        self._changed()

    @property
    def stopped(self) -> bool:
        with self._cond:
            return self._stop

    @property
    def paused(self) -> bool:
        with self._cond:
            return self._paused

    def wait_for_turn(self) -> bool:
        """Block while paused with no step granted, then until the pass interval has passed since the last
        turn; False once a stop was requested."""
        with self._cond:
            while self._paused and self._steps == 0 and not self._stop:
                self._cond.wait()
            self._wait_interval()
            if self._stop:
                return False
            if self._paused:
                self._steps -= 1
            self._last_turn = time.monotonic()
            return True

    def _wait_interval(self) -> None:
        """Wait (holding the condition) until min_pass_interval has passed since the last turn, or a stop."""
        while not self._stop and self._last_turn is not None:
            left = self._last_turn + self._min_interval - time.monotonic()
            if left <= 0:
                return
            self._cond.wait(left)  # a changed interval or a stop wakes it early
