"""The guided lesson's sentences are written from the events they point at (the bundled family, real runs)."""

from __future__ import annotations

import pytest

from app.engine.core.stats import expected_tokens_per_pass, optimal_k, predicted_speedup
from app.engine.events import ACCEPTED, BONUS, REJECTED, EndEvent, PassEvent
from app.engine.settings import DecodeSettings
from app.teaching.lesson import STEPS, LessonRun, explain_step, shown

pytestmark = pytest.mark.slow  # six generations on the bundled family

PROMPT = "for i in range(10):"


@pytest.fixture(scope="module")
def models():
    from app.engine.loading import load_models

    return load_models()  # the bundled family (HF_HUB_OFFLINE=1 in conftest)


@pytest.fixture(scope="module")
def runs(models):
    """Every step's run, as the lesson panel makes them (steps with the same settings share one run)."""
    from app.engine.decoding.decoder import SpeculativeDecoder

    decoder = SpeculativeDecoder(models)
    done: dict[str, LessonRun] = {}
    by_step: dict[str, LessonRun] = {}
    for step in STEPS:
        settings = DecodeSettings().with_changes(**step.settings_changes(models.available_drafters))
        key = repr(settings.to_dict())
        if key not in done:
            events = list(decoder.generate(PROMPT, settings))
            done[key] = LessonRun(settings.to_dict(), tuple(e for e in events if isinstance(e, PassEvent)),
                                  next(e for e in events if isinstance(e, EndEvent)))
        by_step[step.key] = done[key]
    return by_step


def step(key):
    return next(s for s in STEPS if s.key == key)


def explained(runs, key):
    explanation = explain_step(step(key), runs[key], runs)
    event = next((e for e in runs[key].passes if e.index == explanation.pass_index), None)
    return explanation.sentence, event


def test_the_draft_step_names_the_drafted_tokens_of_its_pass(runs):
    sentence, event = explained(runs, "draft")
    assert event is not None and len(event.drafted) >= 2
    assert f"Pass {event.index}" in sentence and f"next {len(event.drafted)} tokens" in sentence
    assert all(shown(t.text) in sentence for t in event.drafted)


def test_the_verification_step_times_its_pass(runs):
    sentence, event = explained(runs, "verify")
    assert event is not None and event.timing.prompt_tokens == 0
    assert f"{event.timing.verify_ms:.1f} ms" in sentence and f"all {len(event.drafted)} drafts" in sentence
    cost = runs["verify"].end.stats.verify_cost
    assert cost is None or f"{cost:.2f} times" in sentence


def test_the_greedy_step_explains_its_rejection_by_the_argmax(runs):
    sentence, event = explained(runs, "greedy")
    assert event is not None
    rejected = next(t for t in event.drafted if t.outcome == REJECTED)
    assert shown(rejected.text) in sentence and f"p = {rejected.p:.3g}" in sentence and "argmax" in sentence
    assert shown(event.appended.text) in sentence and rejected.id != rejected.target_id
    assert all(shown(t.text) in sentence for t in event.drafted if t.outcome == ACCEPTED)


def test_the_sampling_step_quotes_p_q_u_of_its_draft(runs):
    sentence, event = explained(runs, "sampling")
    assert event is not None and event.verify == "sample"
    token = next((t for t in event.drafted if t.outcome == REJECTED and t.u is not None),
                 next(t for t in event.drafted if t.u is not None))
    for figure in (f"q = {token.q:.3g}", f"p = {token.p:.3g}", f"min(1, p/q) = {token.accept_prob:.3f}",
                   f"u = {token.u:.3f}"):
        assert figure in sentence
    assert ("rejected" in sentence) == (token.outcome == REJECTED)
    assert (token.u <= token.accept_prob) == (token.outcome != REJECTED)  # the rule the sentence states


def test_the_bonus_step_points_at_a_pass_whose_drafts_were_all_accepted(runs):
    sentence, event = explained(runs, "bonus")
    assert event is not None and event.appended.kind == BONUS
    assert all(t.outcome == ACCEPTED for t in event.drafted)
    assert shown(event.appended.text) in sentence and f"{len(event.drafted) + 1} tokens" in sentence


def test_the_theory_steps_compute_from_the_runs_statistics(runs):
    sentence, _ = explained(runs, "theory")
    stats = runs["theory"].end.stats
    assert f"α = {stats.alpha:.2f}" in sentence
    assert f"= {expected_tokens_per_pass(stats.alpha, 4):.2f} tokens" in sentence
    assert f"made {stats.tokens_per_pass:.2f}" in sentence
    sentence, _ = explained(runs, "best-k")
    best = optimal_k(stats.alpha, stats.c, k_max=16)
    assert f"best K = {best}" in sentence and f"{predicted_speedup(stats.alpha, best, stats.c):.2f}x" in sentence


def test_the_second_drafter_and_tree_and_asd_steps_read_their_own_runs(runs):
    sentence, _ = explained(runs, "second")
    second = runs["second"]
    assert second.settings["drafters"] != runs["draft"].settings["drafters"]
    assert f"α = {second.end.stats.alpha:.2f}" in sentence and f"α = {runs['draft'].end.stats.alpha:.2f}" in sentence
    sentence, event = explained(runs, "tree")
    assert event is not None and event.tree is not None
    assert f"{len(event.tree)} nodes" in sentence and f"path of {len(event.path)} token" in sentence
    sentence, _ = explained(runs, "asd")
    asd = runs["asd"].end.asd
    assert asd is not None and f"accepted {asd.exceptions} mismatch" in sentence and f"{asd.spent:.2f}" in sentence
