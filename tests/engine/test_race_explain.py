"""The race driver (two lanes, own clocks, text comparison) and the pass explanation, on tiny models."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from app.engine.events import ACCEPTED, ASD_EXCEPTION, CLIPPED, REJECTED, EndEvent, PassEvent
from app.engine.loading import load_models
from app.engine.race import PLAIN, SPECULATIVE, Race, RaceEvent, RaceResult, first_divergence, token_edit_distance
from app.engine.settings import AsdSettings, DecodeSettings, SamplingSettings
from app.teaching.explain import DISCARDED, EXCEPTION, KEPT, REJECTED_HERE, REUSED, explain_pass, inspect_pass
from tests.engine.helpers import PROMPTS, run

CHAINS = [("draft-model",), ("prompt-lookup",), ("ngram-cache",), ("layer-skip",), ("prompt-lookup", "draft-model")]
# Loose enough that random tiny models accept mismatches: the speculative text then differs on purpose.
LOOSE_ASD = AsdSettings(budget=50.0, gate=5.0, cap=4)


@pytest.fixture(scope="module")
def models(tiny_llama):
    target, draft = tiny_llama
    return load_models(str(target), str(draft), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def decoder(models):
    from app.engine.decoding.decoder import SpeculativeDecoder

    return SpeculativeDecoder(models)


def race(models, prompt: str, **settings) -> tuple[list[RaceEvent], RaceResult]:
    items = list(Race(models).generate(prompt, DecodeSettings(**settings)))
    assert isinstance(items[-1], RaceResult)
    assert all(isinstance(item, RaceEvent) for item in items[:-1])
    return items[:-1], items[-1]


def lane_passes(items: list[RaceEvent], lane: str) -> list[PassEvent]:
    return [item.event for item in items if item.lane == lane and isinstance(item.event, PassEvent)]


# ---------------------------------------------------------------- race


@pytest.mark.parametrize("chain", CHAINS, ids="+".join)
def test_race_texts_are_identical_under_greedy_for_every_drafter(models, chain):
    items, result = race(models, PROMPTS[0], drafters=chain, k=4, max_new_tokens=16)
    assert result.must_match and result.identical, (result.first_divergence, chain)
    assert result.edit_distance == 0
    assert result.plain.token_ids == result.speculative.token_ids and len(result.plain.token_ids) == 16
    assert result.plain.text == result.speculative.text
    assert all(not p.drafted for p in lane_passes(items, PLAIN))  # the plain lane is one target forward per token
    assert result.plain.passes == 16 == len(lane_passes(items, PLAIN))
    assert result.speculative.passes == len(lane_passes(items, SPECULATIVE))


def test_each_clock_counts_its_own_work_and_the_lane_behind_runs_next(models):
    items, result = race(models, PROMPTS[1], drafters=("draft-model",), k=3, max_new_tokens=12)
    clocks = {PLAIN: 0.0, SPECULATIVE: 0.0}
    ended = set()
    for item in items:
        other = SPECULATIVE if item.lane == PLAIN else PLAIN
        assert item.lane not in ended
        assert other in ended or clocks[item.lane] <= clocks[other]  # the lane behind advanced
        assert item.clock_s >= clocks[item.lane]
        clocks[item.lane] = item.clock_s
        if isinstance(item.event, EndEvent):
            ended.add(item.lane)
    assert ended == {PLAIN, SPECULATIVE}
    assert (result.plain.wall_s, result.speculative.wall_s) == (clocks[PLAIN], clocks[SPECULATIVE])
    assert result.plain.tokens_per_s == pytest.approx(12 / clocks[PLAIN])


def test_race_reports_the_first_divergence_under_asd(models):
    items, result = race(models, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=20, verify="asd",
                         asd=LOOSE_ASD)
    exceptions = [t for p in lane_passes(items, SPECULATIVE) for t in p.drafted if t.outcome == ASD_EXCEPTION]
    assert exceptions, "the loose budget should let ASD accept mismatches on random models"
    plain, spec = result.plain.token_ids, result.speculative.token_ids
    assert not result.must_match and not result.identical
    expected = next(i for i, (a, b) in enumerate(zip(plain, spec, strict=False)) if a != b)
    assert result.first_divergence == expected
    assert plain[:expected] == spec[:expected]
    assert 0 < result.edit_distance <= max(len(plain), len(spec))
    asd = result.speculative.asd  # what ASD spent and bought, for the race's words
    assert asd is not None and asd.exceptions == len(exceptions) and result.plain.asd is None


def test_asd_with_zero_budget_must_match(models):
    _, result = race(models, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=12, verify="asd",
                     asd=AsdSettings(budget=0.0, gate=5.0, cap=4))
    assert result.must_match and result.identical


def test_race_validates_the_prompt_before_running(models):
    from app.engine.settings import SettingsError

    with pytest.raises(SettingsError):
        Race(models).generate("   ", DecodeSettings())


def _levenshtein(a, b) -> int:
    if not a or not b:
        return len(a) + len(b)
    return min(_levenshtein(a[1:], b) + 1, _levenshtein(a, b[1:]) + 1, _levenshtein(a[1:], b[1:]) + (a[0] != b[0]))


def test_divergence_and_edit_distance_on_small_sequences():
    rng = random.Random(0)
    for _ in range(200):
        a = tuple(rng.randrange(3) for _ in range(rng.randrange(7)))
        b = tuple(rng.randrange(3) for _ in range(rng.randrange(7)))
        assert token_edit_distance(a, b) == _levenshtein(a, b)
        first = first_divergence(a, b)
        if a == b:
            assert first is None
        else:
            assert a[:first] == b[:first] and (first == min(len(a), len(b)) or a[first] != b[first])


# ---------------------------------------------------------------- explanation


def test_inspection_reproduces_the_sampling_verdicts(decoder):
    passes, _ = run(decoder, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=30, verify="sample",
                    sampling=SamplingSettings(temperature=1.0, top_k=5))
    rejections = 0
    for event in passes:
        inspection = inspect_pass(event)
        first = len(event.drafted) if inspection.first_rejection is None else inspection.first_rejection
        for position in inspection.positions:
            token = position.token
            assert (position.accept_prob, position.u) == (token.accept_prob, token.u)
            assert position.ratio == pytest.approx(token.p / token.q)
            if position.index < first:
                assert token.u <= token.accept_prob and position.verdict == KEPT
        if inspection.first_rejection is not None:
            rejections += 1
            n = inspection.first_rejection
            assert event.drafted[n].u > event.drafted[n].accept_prob
            assert inspection.positions[n].verdict == REJECTED_HERE
            assert all(p.verdict == DISCARDED for p in inspection.positions[n + 1:])
            _check_residual(event)
    assert rejections > 0


def _check_residual(event: PassEvent) -> None:
    detail = event.detail
    assert detail.residual, "a rejection under sampling stores its residual row"
    assert sum(e.r for e in detail.residual) + detail.residual_other == pytest.approx(1.0, abs=1e-6)
    assert detail.residual_other == pytest.approx(0.0, abs=1e-6)  # top-k 5: the entries hold the whole support
    for entry in detail.residual:
        if entry.q >= entry.p:
            assert entry.r == 0.0
        else:
            assert entry.r == pytest.approx((entry.p - entry.q) / detail.residual_norm, rel=1e-5)
    assert event.appended.id in {e.id for e in detail.residual if e.r > 0}  # the sample came from the residual


def test_one_hot_drafter_residual_is_p_without_the_draft(decoder):
    passes, _ = run(decoder, PROMPTS[0], drafters=("prompt-lookup",), k=4, max_new_tokens=30, verify="sample",
                    sampling=SamplingSettings(top_k=5))
    rejected = [e for e in passes if e.detail.residual]
    assert rejected
    for event in rejected:
        n = inspect_pass(event).first_rejection
        x = event.drafted[n]
        by_id = {e.id: e for e in event.detail.residual}
        assert by_id[x.id].q == 1.0 and by_id[x.id].r == 0.0
        assert event.detail.residual_norm == pytest.approx(1.0 - x.p, abs=1e-6)
        _check_residual(event)


def test_asd_checks_reproduce_the_accepted_prefix_and_the_ledger(decoder):
    passes, _ = run(decoder, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=40, verify="asd",
                    asd=LOOSE_ASD)
    spent = 0.0
    for event in passes:
        inspection = inspect_pass(event)
        checks = [p.asd for p in inspection.positions]
        feasible = len(list(itertools.takewhile(lambda c: c.feasible, checks)))
        judged = [t for t in event.drafted if t.outcome != CLIPPED]
        if len(judged) == len(event.drafted):
            assert feasible == event.n_accepted
        assert [c.suffix_value for c in checks] == list(range(len(checks), 0, -1))
        assert all(c.gate == LOOSE_ASD.gate and c.cap == LOOSE_ASD.cap for c in checks)
        assert inspection.ledger.before == pytest.approx(spent)
        assert inspection.ledger.after == event.ledger.spent
        spent = event.ledger.spent
        for position in inspection.positions:
            if position.token.outcome == ASD_EXCEPTION:
                assert position.verdict == EXCEPTION and position.asd.mismatch
    assert any(t.outcome == ASD_EXCEPTION for e in passes for t in e.drafted)


def test_explanation_tells_the_story_from_the_numbers(decoder, models):
    text_of = lambda token_id: models.tokenizer.decode([token_id])  # noqa: E731
    passes, _ = run(decoder, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=30)
    rejected = next(e for e in passes if any(t.outcome == REJECTED for t in e.drafted))
    story = explain_pass(rejected, text_of)
    n = inspect_pass(rejected).first_rejection
    assert f"proposed {len(rejected.drafted)} tokens" in story
    assert f"At position {n + 1}" in story
    assert f"“{text_of(rejected.drafted[n].target_id)}”".replace("\n", "↵") in story  # the target's argmax
    assert f"committed {len(rejected.committed_ids)} token" in story

    plain, _ = run(decoder, PROMPTS[1], drafters=(), max_new_tokens=3)
    assert "nothing was drafted" in explain_pass(plain[0], text_of)

    sampled, _ = run(decoder, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=30, verify="sample")
    event = next(e for e in sampled if e.detail.residual)
    story = explain_pass(event, text_of)
    token = event.drafted[inspect_pass(event).first_rejection]
    assert f"u = {token.u:.3g}" in story and f"min(1, p/q) = {token.accept_prob:.3g}" in story
    assert "residual" in story


def test_inspection_marks_the_reused_suffix_after_an_exception(decoder, models):
    passes, _ = run(decoder, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=40, verify="asd",
                    asd=LOOSE_ASD)
    text_of = lambda token_id: models.tokenizer.decode([token_id])  # noqa: E731
    for event in passes:
        inspection = inspect_pass(event)
        verdicts = [p.verdict for p in inspection.positions]
        first = verdicts.index(EXCEPTION) if EXCEPTION in verdicts else len(verdicts)
        assert KEPT not in verdicts[first + 1:] and REUSED not in verdicts[:first]
        assert verdicts.count(REUSED) == event.asd_reused
        story = explain_pass(event, text_of)
        assert ("reused them without another forward" in story) == (event.asd_reused > 0)
    # A block with an exception, two reused matches behind it and a rejection, built from a real pass.
    event = next(e for e in passes if len(e.drafted) == 4)
    outcomes = [ASD_EXCEPTION, ACCEPTED, ACCEPTED, REJECTED]
    drafted = tuple(replace(t, outcome=o, target_id=t.id if o == ACCEPTED else t.id + 1)
                    for t, o in zip(event.drafted, outcomes, strict=True))
    event = replace(event, drafted=drafted, asd_reused=2, asd_saved=3)
    assert [p.verdict for p in inspect_pass(event).positions] == [EXCEPTION, REUSED, REUSED, REJECTED_HERE]
    story = explain_pass(event, text_of)
    assert "The 2 drafts after the first exception" in story and "strict greedy would have kept 0 drafts" in story
