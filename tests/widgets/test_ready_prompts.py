"""Every ready prompt's lesson is true of the bundled models, and the guide explains what it promises."""

from __future__ import annotations

import pytest

from app.engine.core.stats import Acceptance
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.registry import DRAFTER_LABELS
from app.engine.events import ASD_EXCEPTION, RESAMPLED, EndEvent, PassEvent
from app.engine.loading import load_models
from app.engine.settings import DecodeSettings, RepetitionSettings
from app.widgets.guide import READY_PROMPTS, ReadyPrompt, guide_html

TOKENS = 128  # the window's default max new tokens


@pytest.fixture(scope="module")
def decoder():
    return SpeculativeDecoder(load_models())  # the bundled pair (HF_HUB_OFFLINE=1 in conftest)


def ready(title_start: str) -> ReadyPrompt:
    return next(r for r in READY_PROMPTS if r.title.startswith(title_start))


def run(decoder, prompt: ReadyPrompt, **changes) -> tuple[list[PassEvent], EndEvent]:
    """The prompt with its set-up and the default settings, as "Use" then Generate does."""
    settings = DecodeSettings(drafters=prompt.drafters, k=prompt.k, verify=prompt.verify, max_new_tokens=TOKENS,
                              repetition=decoder.models.suggested_repetition)  # where a newcomer's window starts
    events = list(decoder.generate(prompt.prompt, settings.with_changes(**changes)))
    end = events[-1]
    assert isinstance(end, EndEvent) and end.reason != "error", end
    return [e for e in events if isinstance(e, PassEvent)], end


def alpha_of(passes: list[PassEvent]) -> float | None:
    acceptance = Acceptance()
    for event in passes:
        acceptance.add(event.drafted)
    return acceptance.alpha


def test_every_ready_prompt_has_a_checked_lesson():
    checked = {"Repetitive code", "Free prose: prompt lookup", "Free prose with a draft model", "Fallback chain",
               "Sampling stays lossless", "ASD"}
    assert {next(c for c in checked if r.title.startswith(c)) for r in READY_PROMPTS} == checked
    assert len(READY_PROMPTS) == len(checked)


def test_the_bundled_family_suggests_a_repetition_penalty(decoder):
    assert decoder.models.suggested_repetition.penalty > 1.0  # the lessons below hold with it, as the window starts


def test_repetitive_code_lookup_commits_several_tokens_a_pass(decoder):
    prompt = ready("Repetitive code")
    passes, end = run(decoder, prompt)
    assert end.stats.alpha >= 0.9
    assert end.stats.tokens_per_pass >= 0.5 * (prompt.k + 1)
    assert sum(bool(e.drafted) for e in passes) >= 0.7 * len(passes)  # lookup finds a copy in most passes


def test_free_prose_lookup_has_little_to_copy_unless_the_text_loops(decoder):
    prompt = ready("Free prose: prompt lookup")
    passes, end = run(decoder, prompt)
    first = passes[:20]
    assert sum(not e.drafted for e in first) >= len(first) / 2  # mostly plain steps
    assert alpha_of(first) is None or alpha_of(first) < 0.3  # and what it proposes is rejected
    code_passes, code_end = run(decoder, ready("Repetitive code"))
    assert end.stats.tokens_per_pass < 0.6 * code_end.stats.tokens_per_pass
    looping, _end = run(decoder, prompt, repetition=RepetitionSettings())  # the penalty at 1.0: the text loops
    assert alpha_of(looping[20:]) > 0.8  # and lookup copies the model's own loop: α climbs


def test_free_prose_draft_model_drafts_every_pass_near_e(decoder):
    prompt = ready("Free prose with a draft model")
    passes, end = run(decoder, prompt)
    assert all(e.drafted for e in passes[:-1])  # the last pass may be clipped to nothing by the token limit
    assert end.stats.alpha > 0.65
    assert end.stats.tokens_per_pass == pytest.approx(end.stats.expected_tokens_per_pass, rel=0.1)


def test_fallback_chain_uses_both_drafters(decoder):
    passes, _end = run(decoder, ready("Fallback chain"))
    assert {e.drafter for e in passes} >= {"prompt-lookup", "draft-model"}


def test_sampling_rejections_resample_from_the_residual(decoder):
    passes, _end = run(decoder, ready("Sampling stays lossless"))
    resampled = [e for e in passes if e.appended is not None and e.appended.kind == RESAMPLED]
    assert len(resampled) >= 3
    assert all(e.detail is not None and e.detail.residual for e in resampled)
    assert all(any(t.u is not None and t.u > t.accept_prob for t in e.drafted) for e in resampled)


def test_asd_spends_regret_for_longer_blocks_and_changes_the_text(decoder):
    prompt = ready("ASD")
    passes, end = run(decoder, prompt)
    greedy_passes, greedy_end = run(decoder, prompt, verify="greedy")
    assert sum(t.outcome == ASD_EXCEPTION for e in passes for t in e.drafted) > 0
    assert 0 < passes[-1].ledger.spent <= passes[-1].ledger.budget
    assert end.stats.tokens_per_pass > greedy_end.stats.tokens_per_pass
    assert len(passes) < len(greedy_passes)
    assert end.token_ids != greedy_end.token_ids  # plain greedy decoding gives the greedy text (the race's lane)


def test_guide_explains_every_drafter_and_the_memory_bound_forward():
    page = guide_html()
    for label in DRAFTER_LABELS.values():
        assert f"<b>{label}</b>" in page
    assert "memory-bandwidth bound" in page and "read every weight from memory" in page
    assert page.index("Ready prompts") < page.index("Colours in the text")  # ready prompts near the top
    assert "v<sub>i</sub> = K − i" in page and "q<sub>i</sub> = K" not in page
