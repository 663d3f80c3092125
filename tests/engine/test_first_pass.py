"""A request's first chain pass reads the prompt in its own forward, as `generate` does: one target forward per
pass, no separate prefill; its event says so, and the statistics take no one-forward sample from it."""

from __future__ import annotations

import pytest

from app.engine.core.stats import GenerationStats
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import DraftedToken, Timing
from app.engine.loading import load_models
from app.teaching.explain import explain_pass
from tests.engine.helpers import PROMPTS, run


@pytest.fixture(scope="module")
def decoder(tiny_llama):
    target, draft = tiny_llama
    return SpeculativeDecoder(load_models(str(target), str(draft)))


def _count_target_forwards(decoder, monkeypatch) -> list[int]:
    """Rows fed to each target forward from now on, one-token steps that skip `forward` (lean_forward.py) included."""
    model = decoder.models.target
    rows: list[int] = []
    forward, lean = model.forward, decoder.target._lean  # noqa: SLF001 - counting its calls

    def counted(*args, **kwargs):
        rows.append(kwargs["input_ids"].shape[-1])
        return forward(*args, **kwargs)

    def counted_lean(fed, *args):
        rows.append(fed.shape[-1])
        return lean(fed, *args)

    monkeypatch.setattr(model, "forward", counted)
    if lean is not None:
        monkeypatch.setattr(decoder.target, "_lean", counted_lean)
    return rows


def test_a_plain_run_makes_one_target_forward_per_pass(decoder, monkeypatch):
    decoder.forget_caches()
    prompt_ids = decoder.encode_prompt(PROMPTS[0])
    rows = _count_target_forwards(decoder, monkeypatch)
    passes, end = run(decoder, PROMPTS[0], drafters=(), max_new_tokens=12)
    assert len(rows) == len(passes) == 12
    assert rows[0] == len(prompt_ids) and set(rows[1:]) == {1}
    assert passes[0].timing.prompt_tokens == len(prompt_ids) - 1
    assert all(p.timing.prompt_tokens == 0 for p in passes[1:])
    assert "also read the prompt" in explain_pass(passes[0])


def test_a_warm_cache_reads_no_prompt_and_ids_do_not_change(decoder):
    decoder.forget_caches()
    cold = run(decoder, PROMPTS[1], drafters=(), max_new_tokens=10)
    warm = run(decoder, PROMPTS[1], drafters=(), max_new_tokens=10)  # the cache holds the prompt and more
    assert warm[0][0].timing.prompt_tokens == 0
    assert warm[1].token_ids == cold[1].token_ids


@pytest.mark.parametrize("drafters", [("draft-model",), ("prompt-lookup", "draft-model")])
def test_drafting_runs_keep_their_ids_when_an_earlier_cache_holds_the_drafts(decoder, drafters):
    """A warm cache may already hold this request's drafts (the same prompt ran before): they are fed anyway, so
    the verification has its K' + 1 rows."""
    decoder.forget_caches()
    plain = run(decoder, PROMPTS[2], drafters=(), max_new_tokens=16)[1]
    for _ in range(2):
        passes, end = run(decoder, PROMPTS[2], drafters=drafters, k=4, max_new_tokens=16)
        assert end.token_ids == plain.token_ids
        assert all(p.timing.prompt_tokens == 0 for p in passes)  # the timed forwards fed the prompt first


def test_a_pass_that_read_the_prompt_is_no_sample_of_one_forward():
    stats = GenerationStats()
    stats.add_pass((), 1, Timing(draft_ms=0.0, verify_ms=50.0, total_ms=51.0, prompt_tokens=40))
    stats.add_pass((), 1, Timing(draft_ms=0.0, verify_ms=3.0, total_ms=3.5))
    assert stats.target_forward_ms == 3.0
    assert stats.tokens == 2 and stats.elapsed_ms == 54.5  # its time still counts for tokens/s
    drafted = (DraftedToken(id=1, text="a", q=None, p=0.5, target_id=1, regret=None, outcome="accepted"),)
    stats.add_pass(drafted, 2, Timing(draft_ms=1.0, verify_ms=60.0, total_ms=62.0, prompt_tokens=40))
    assert stats.verify_cost is None  # no drafting pass left to measure v on
    assert stats.c == pytest.approx(1.0 / 3.0)  # the draft time counts: the prompt was read in the verification
