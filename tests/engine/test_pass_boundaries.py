"""Where a pass meets a bound: adaptive K's limits, a block clipped at EOS, the end of the context."""

from __future__ import annotations

import pytest

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import ACCEPTED, REJECTED
from app.engine.loading import load_models
from tests.engine.helpers import PROMPTS, run
from tests.tiny_models import tiny_pair

CONTEXT = 40


@pytest.fixture(scope="module")
def decoder(tiny_llama):
    target, draft = tiny_llama
    return SpeculativeDecoder(load_models(str(target), str(draft)))


# ---- adaptive K starts within [k_min, k_max] --------------------------------------------------------


def test_adaptive_k_above_its_maximum_starts_at_the_maximum(decoder):
    passes, _ = run(decoder, PROMPTS[1], drafters=("draft-model",), k=32, adaptive_k=True, k_min=1, k_max=16,
                    max_new_tokens=60)
    assert passes[0].k == 16
    assert max(p.k for p in passes) <= 16


def test_adaptive_k_below_its_minimum_starts_at_the_minimum(decoder):
    passes, _ = run(decoder, PROMPTS[1], drafters=("draft-model",), k=1, adaptive_k=True, k_min=3, k_max=8,
                    max_new_tokens=40)
    assert passes[0].k == 3
    assert all(p.k >= 3 for p in passes if 40 - p.position - 1 >= 3)  # unless the token limit is nearer


# ---- the inspector's residual follows the clipped commit --------------------------------------------


def _accepted_then_rejected(passes):
    """The first pass with an accepted draft before a rejected one that drew from the residual, and that draft."""
    seen: set[int] = set()
    for p in passes:
        outcomes = [t.outcome for t in p.drafted]
        if REJECTED in outcomes and p.detail.residual:
            for i, t in enumerate(p.drafted[: outcomes.index(REJECTED)]):
                if t.outcome == ACCEPTED and t.id not in seen and t.id not in [d.id for d in p.drafted[:i]]:
                    return p, t.id
        seen.update(p.committed_ids)
    return None, None


def test_a_block_clipped_at_an_accepted_eos_shows_no_residual(tiny_llama):
    target, draft = tiny_llama
    models = load_models(str(target), str(draft))
    settings = dict(drafters=("draft-model",), k=4, verify="sample", max_new_tokens=40)
    found = None
    for seed in range(20):
        passes, _ = run(SpeculativeDecoder(models), PROMPTS[1], seed=seed, **settings)
        pass_, stopper = _accepted_then_rejected(passes)
        if pass_ is not None:
            found = seed, pass_.index, stopper
            break
    assert found, "no pass with an accepted draft before a rejected one"
    seed, index, stopper = found
    models.target.generation_config.eos_token_id = stopper
    try:
        passes, end = run(SpeculativeDecoder(models), PROMPTS[1], seed=seed, **settings)
    finally:
        models.target.generation_config.eos_token_id = models.tokenizer.eos_token_id
    last = passes[-1]
    assert end.reason == "eos" and last.index == index and last.appended is None
    assert REJECTED in [t.outcome for t in last.drafted]  # the rule rejected a later draft ...
    assert last.detail.residual == () and last.detail.residual_norm is None  # ... but nothing was drawn from it


# ---- the context holds C fed positions and one more, unfed, token -----------------------------------


@pytest.fixture(scope="module")
def short_gpt2(tmp_path_factory):
    """GPT-2 with learned positions 0 .. CONTEXT-1: feeding position CONTEXT would fail."""
    target, draft = tiny_pair(tmp_path_factory.mktemp("short-gpt2"), "gpt2", context=CONTEXT, mute_eos=True)
    return load_models(str(target), str(draft))


@pytest.mark.parametrize("drafters,k", [((), 1), (("draft-model",), 5), (("prompt-lookup",), 3)])
def test_generation_fills_the_context_and_one_more_token(short_gpt2, drafters, k):
    decoder = SpeculativeDecoder(short_gpt2)
    n_prompt = len(short_gpt2.tokenizer(PROMPTS[0]).input_ids)
    passes, end = run(decoder, PROMPTS[0], drafters=drafters, k=k, max_new_tokens=100)
    assert end.reason == "context_full"
    assert n_prompt + len(end.token_ids) == CONTEXT + 1
    _, plain = run(decoder, PROMPTS[0], drafters=(), max_new_tokens=CONTEXT + 1 - n_prompt)
    assert end.token_ids == plain.token_ids  # the last token is the greedy one, not a guess


def test_a_prompt_that_fills_the_context_still_gets_one_token(short_gpt2):
    decoder = SpeculativeDecoder(short_gpt2)
    prompt = short_gpt2.tokenizer.decode(short_gpt2.tokenizer(PROMPTS[0] * 4).input_ids[:CONTEXT])
    assert len(short_gpt2.tokenizer(prompt).input_ids) == CONTEXT
    _, end = run(decoder, prompt, drafters=("draft-model",), k=4, max_new_tokens=10)
    assert end.reason == "context_full" and len(end.token_ids) == 1
