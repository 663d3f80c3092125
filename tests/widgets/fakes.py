"""A fake engine that yields engine-shaped events without a model.

It implements the `Engine` protocol (app/engine/engine.py) as the real ones
do: settings are read from the LiveSettings holder at every pass,
`control.wait_for_turn()` is checked between passes, and an EndEvent always
comes last. Used for fast, deterministic widget tests (long streams, exotic
outcomes, failures).
"""

from __future__ import annotations

import random
import time

from app.engine.engine import ModelsSummary
from app.engine.events import (
    ACCEPTED,
    ASD_EXCEPTION,
    BONUS,
    REJECTED,
    RESAMPLED,
    TARGET,
    AppendedToken,
    DraftedToken,
    EndEvent,
    Ledger,
    PassEvent,
    RunningStats,
    StartEvent,
    Timing,
)

WORDS = ["the", " cat", " sat", " on", " a", " mat", ".", "\n", " <b>", " fox", " 🙂", " jumps"]


FAKE_SUMMARY = ModelsSummary(target_name="fake-target", draft_name="fake-draft", device="cpu", dtype="float32",
                             available_drafters=("draft-model", "prompt-lookup", "ngram-cache", "layer-skip"),
                             num_layers=4, default_exit_layer=1, context_length=100_000)


class FakeEngine:
    def __init__(self, fail_after: int | None = None, pass_delay_s: float = 0.0) -> None:
        self.summary = FAKE_SUMMARY
        self.fail_after = fail_after
        self.pass_delay_s = pass_delay_s
        self.closed = False

    @property
    def alive(self) -> bool:
        return not self.closed

    def token_text(self, token_id: int) -> str:
        return WORDS[token_id] if 0 <= token_id < len(WORDS) else ""

    def close(self) -> None:
        self.closed = True

    def race(self, prompt, live, control=None, chat_template=False):
        raise NotImplementedError("the fake engine does not race; the race tests use the real engine")

    def generate(self, prompt, live, control, chat_template=False):
        rng = random.Random(live.get().seed)
        started = time.perf_counter()
        yield StartEvent("fake-target", "fake-draft", "cpu", "float32", live.get().to_dict(), (1, 2), prompt)
        ids, index, spent, exceptions = [], 0, 0.0, 0
        reason = "max_tokens"
        while len(ids) < live.get().max_new_tokens:
            if not control.wait_for_turn():
                reason = "stopped"
                break
            if self.fail_after is not None and index >= self.fail_after:
                raise RuntimeError("fake drafter exploded")
            settings = live.get()
            event = self._pass(rng, settings, index, len(ids), spent, exceptions)
            spent, exceptions = event.ledger.spent, event.ledger.exceptions
            ids.extend(event.committed_ids)
            index += 1
            if self.pass_delay_s:
                time.sleep(self.pass_delay_s)
            yield event
        stats = RunningStats(alpha=0.5, tokens_per_pass=len(ids) / max(index, 1), c=0.1, tokens_per_s=100.0)
        yield EndEvent(reason, tuple(ids), "", index, time.perf_counter() - started, stats)

    def _pass(self, rng, settings, index, position, spent, exceptions) -> PassEvent:
        drafter = settings.drafters[0] if settings.drafters else None
        drafted = self._drafts(rng, settings, drafter) if drafter else ()
        spent += sum(t.regret or 0.0 for t in drafted if t.outcome == ASD_EXCEPTION)
        exceptions += sum(t.outcome == ASD_EXCEPTION for t in drafted)
        if not drafter:
            kind = TARGET
        elif all(t.outcome != REJECTED for t in drafted):
            kind = BONUS
        else:
            kind = RESAMPLED
        word = rng.randrange(len(WORDS))
        appended = AppendedToken(word, WORDS[word], kind, 0.9)
        budget = settings.asd.budget if settings.verify == "asd" else 0.0
        stats = RunningStats(alpha=0.5, tokens_per_pass=2.0, c=0.1, tokens_per_s=100.0 + index)
        return PassEvent(index, drafter, settings.k, settings.verify, drafted, appended,
                         Ledger(spent, budget, exceptions), Timing(0.1, 1.0, 1.2), position, stats)

    def _drafts(self, rng, settings, drafter) -> tuple[DraftedToken, ...]:
        out, rejected = [], False
        for _ in range(settings.k):
            word = rng.randrange(len(WORDS))
            if rejected:
                outcome = REJECTED
            elif settings.verify == "asd" and rng.random() < 0.2:
                outcome = ASD_EXCEPTION
            elif rng.random() < 0.7:
                outcome = ACCEPTED
            else:
                outcome, rejected = REJECTED, True
            regret = 0.1 if settings.verify == "asd" else None
            q = None if drafter in ("prompt-lookup", "ngram-cache") else 0.6
            out.append(DraftedToken(word, WORDS[word], q, 0.5, word, regret, outcome))
        return tuple(out)
