"""Repetition controls (docs/ALGORITHMS.md §4.5): Hugging Face's exact semantics, greedy identity with
`model.generate`, lossless sampling of the processed distribution, and the same processing for every drafter."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
)

from app.engine.core.repetition import RepetitionSettings, process_rows
from app.engine.core.sampling import TokenSampler
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.heads import FAMILIES, TargetShape, build_module, default_config, save_head
from app.engine.events import StartEvent
from app.engine.loading import load_models
from app.engine.settings import DecodeSettings, SamplingSettings, SettingsError, settings_from_dict
from tests.engine.helpers import PROMPTS, chi_square_pvalue, first_two_distribution, run

P_MIN = 1e-3  # chi-square p-value threshold; every sample below uses fixed seeds
LEARNED = tuple(FAMILIES)  # medusa, mtp, eagle, dflash
MODEL_DRAFTERS = ("draft-model", "layer-skip", *LEARNED)


def hf_processed(logits: torch.Tensor, context: torch.Tensor, settings: RepetitionSettings) -> torch.Tensor:
    """Transformers' own processors on one row (V,) for one context (L,), in generate's order."""
    processors = LogitsProcessorList()
    if settings.penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(settings.penalty))
    if settings.no_repeat_ngram > 0:
        processors.append(NoRepeatNGramLogitsProcessor(settings.no_repeat_ngram))
    return processors(context[None], logits[None].clone())[0]


# ---- the function ------------------------------------------------------------------------------


@pytest.mark.parametrize("penalty", [1.0, 1.3, 2.0, 0.7])
@pytest.mark.parametrize("ngram", [0, 1, 2, 3, 4])
def test_process_rows_equals_the_transformers_processors(penalty, ngram):
    settings = RepetitionSettings(penalty, ngram)
    gen = torch.Generator().manual_seed(100 * ngram + int(10 * penalty))
    for _ in range(60):
        v = int(torch.randint(2, 24, (), generator=gen))
        rows = int(torch.randint(1, 7, (), generator=gen))
        prefix = torch.randint(0, v + 2, (int(torch.randint(0, 14, (), generator=gen)),), generator=gen)  # ids >= V
        continuations = [torch.randint(0, v, (int(torch.randint(0, 6, (), generator=gen)),), generator=gen)
                         for _ in range(rows)]
        logits = 3 * torch.randn(rows, v, generator=gen)
        logits[0, 0] = 0.0  # a zero logit is divided, as there
        ours = process_rows(logits, prefix, continuations, settings)
        for r, continuation in enumerate(continuations):
            expected = hf_processed(logits[r], torch.cat([prefix, continuation]), settings)
            assert torch.equal(ours[r], expected), (settings, prefix, continuation)


def test_process_rows_on_chain_contexts_of_a_looping_sequence():
    """Row i continues the committed ids with drafts[:i], as the verification rows of a chain do."""
    settings = RepetitionSettings(1.3, 3)
    ids, drafts = torch.tensor([5, 6, 7, 5, 6, 7, 5, 6]), torch.tensor([7, 5, 6, 9])
    logits = torch.randn(5, 12, generator=torch.Generator().manual_seed(0))
    ours = process_rows(logits, ids, [drafts[:i] for i in range(5)], settings)
    for i in range(5):
        assert torch.equal(ours[i], hf_processed(logits[i], torch.cat([ids, drafts[:i]]), settings))
    assert ours[0, 7] == -math.inf and ours[1, 5] == -math.inf and ours[4, 9] != -math.inf


def test_both_controls_off_return_the_logits_untouched():
    logits = torch.randn(3, 10, dtype=torch.bfloat16)
    assert process_rows(logits, torch.tensor([1, 2, 1, 2]), [torch.tensor([1])] * 3, RepetitionSettings()) is logits
    sampler = TokenSampler(None, torch.Generator(), RepetitionSettings(), torch.tensor([1, 2]))
    assert sampler.process(logits, [torch.tensor([1])] * 3) is logits


def test_process_rows_works_in_float32_and_checks_its_rows():
    logits = torch.randn(2, 10, dtype=torch.bfloat16)
    out = process_rows(logits, torch.tensor([1, 2]), [torch.tensor([]), torch.tensor([3])], RepetitionSettings(1.2))
    assert out.dtype == torch.float32
    with pytest.raises(ValueError, match="one continuation per row"):
        process_rows(logits, torch.tensor([1]), [torch.tensor([])], RepetitionSettings(1.2))


# ---- settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs,message", [
    (dict(penalty=0.0), "repetition penalty must be a number > 0, 1.0 meaning off (got 0.0)"),
    (dict(penalty=-1.2), "repetition penalty must be a number > 0"),
    (dict(penalty=math.inf), "repetition penalty must be a number > 0"),
    (dict(penalty=math.nan), "repetition penalty must be a number > 0"),
    (dict(penalty=True), "repetition penalty must be a number > 0"),
    (dict(penalty="1.2"), "repetition penalty must be a number > 0"),
    (dict(no_repeat_ngram=-1), "no-repeat n-gram size must be a whole number >= 0, 0 meaning off (got -1)"),
    (dict(no_repeat_ngram=2.0), "no-repeat n-gram size must be a whole number >= 0"),
    (dict(no_repeat_ngram=True), "no-repeat n-gram size must be a whole number >= 0"),
])
def test_settings_say_what_is_allowed(kwargs, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RepetitionSettings(**kwargs)
    with pytest.raises(SettingsError, match="repetition penalty|no-repeat n-gram"):
        DecodeSettings().with_changes(repetition=kwargs)


def test_settings_round_trip_and_reach_the_start_event(tiny_llama):
    settings = DecodeSettings().with_changes(repetition=dict(penalty=1.15, no_repeat_ngram=3))
    assert settings.repetition == RepetitionSettings(1.15, 3) and settings.repetition.active
    assert not DecodeSettings().repetition.active
    plain = settings.to_dict()
    assert plain["repetition"] == {"penalty": 1.15, "no_repeat_ngram": 3}
    assert settings_from_dict(plain) == settings
    assert settings_from_dict({k: v for k, v in plain.items() if k != "repetition"}).repetition == RepetitionSettings()
    decoder = SpeculativeDecoder(load_models(*map(str, tiny_llama)))
    start = next(iter(decoder.generate(PROMPTS[0], settings.with_changes(max_new_tokens=2))))
    assert isinstance(start, StartEvent) and start.settings["repetition"] == plain["repetition"]


def test_identity_checks_judge_a_divergence_on_the_processed_logits(tiny_llama):
    from app.engine.core.identity import logits_at

    target = load_models(*map(str, tiny_llama)).target
    context, repetition = [5, 9, 5, 9, 5], RepetitionSettings(1.3, 2)
    raw = logits_at(target, context)
    processed = logits_at(target, context, repetition)
    assert torch.equal(processed, process_rows(raw[None], torch.tensor(context), [torch.tensor([])], repetition)[0])
    assert processed[9] == -math.inf and raw[9] != -math.inf


# ---- whole generations -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tiny_llama, tmp_path_factory):
    """The tiny Llama pair with untrained heads of every learned family (their drafts are poor, not wrong)."""
    target = load_models(*map(str, tiny_llama)).target
    root = tmp_path_factory.mktemp("heads")
    shape = TargetShape.of(target, target.config.num_hidden_layers)
    for family in LEARNED:
        config = default_config(family, shape, "tiny llama")
        (root / family).mkdir()
        torch.manual_seed(0)
        save_head(root / family, config, build_module(config))
    return load_models(*map(str, tiny_llama), heads=str(root))


@pytest.fixture(scope="module")
def decoder(models):
    return SpeculativeDecoder(models)


def hf_generate(models, prompt: str, n: int, **processors) -> list[int]:
    ids = models.tokenizer(prompt, return_tensors="pt").input_ids
    with torch.inference_mode():
        out = models.target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                                     pad_token_id=models.tokenizer.eos_token_id, **processors)
    return out[0, ids.shape[1]:].tolist()


@pytest.mark.parametrize("drafters", [(), ("draft-model",), ("prompt-lookup",)])
def test_greedy_with_repetition_controls_equals_hf_generate(decoder, drafters):
    repetition = RepetitionSettings(1.3, 3)
    for prompt in PROMPTS:
        expected = hf_generate(decoder.models, prompt, 48, repetition_penalty=1.3, no_repeat_ngram_size=3)
        assert expected != hf_generate(decoder.models, prompt, 48)  # the controls change this text
        _, end = run(decoder, prompt, drafters=drafters, k=4, max_new_tokens=48, repetition=repetition)
        assert list(end.token_ids) == expected, drafters


@pytest.mark.parametrize("drafters", [("layer-skip",), ("ngram-cache",), *((family,) for family in LEARNED)])
def test_every_drafter_keeps_greedy_identity_under_repetition_controls(decoder, drafters):
    repetition = RepetitionSettings(1.3, 3)
    for prompt in PROMPTS[:2]:
        _, plain = run(decoder, prompt, drafters=(), max_new_tokens=32, repetition=repetition)
        passes, end = run(decoder, prompt, drafters=drafters, k=3, max_new_tokens=32, repetition=repetition)
        assert end.token_ids == plain.token_ids
        assert any(p.drafted for p in passes)


def test_the_target_as_its_own_drafter_has_every_draft_accepted_under_repetition_controls(tiny_llama):
    """The drafter's rows are processed exactly like the target's: identical models agree on every draft."""
    target, _ = tiny_llama
    decoder = SpeculativeDecoder(load_models(str(target), str(target)))
    repetition = RepetitionSettings(1.5, 2)
    for verify in ("greedy", "sample"):
        passes, end = run(decoder, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=40, verify=verify,
                          repetition=repetition, seed=3)
        assert end.stats.alpha == 1.0, verify
        assert sum(len(p.drafted) for p in passes) >= 30


def _features(models, ids: torch.Tensor, layers) -> list[torch.Tensor]:
    with torch.inference_mode():
        hidden = models.target(input_ids=ids[None, :-1], output_hidden_states=True).hidden_states
    return [hidden[layer][0] for layer in layers]


@pytest.mark.parametrize("name", MODEL_DRAFTERS)
def test_every_drafter_draws_each_row_for_its_own_context(models, name):
    """With n = 1 every token of the context is banned: row r of q puts no mass on ids or on drafts 0..r-1."""
    from app.engine.drafters.registry import build_drafter

    drafter = build_drafter(name, models, DecodeSettings().options)
    ids = torch.tensor(models.tokenizer(PROMPTS[1]).input_ids)
    for seed in range(3):
        sampler = TokenSampler(SamplingSettings(temperature=2.0), torch.Generator().manual_seed(seed),
                               RepetitionSettings(1.2, 1), ids)
        draft = drafter.propose(ids, 3, sampler, _features(models, ids, drafter.feature_layers))
        assert draft is not None and draft.q is not None and len(draft) >= 1
        for r in range(len(draft)):
            seen = torch.cat([ids, draft.tokens[:r]])
            assert (draft.q[r][seen] == 0).all(), (name, r)
        assert len(set(draft.tokens.tolist())) == len(draft) and not set(draft.tokens.tolist()) & set(ids.tolist())


def looping_prompt(decoder) -> str:
    """A prompt that ends in the tiny model's own greedy loop, so both controls change what comes next."""
    _, end = run(decoder, "the the the the", drafters=(), max_new_tokens=8)
    return "the the the the" + end.text


@pytest.mark.parametrize("drafters", [("draft-model",), ("prompt-lookup",), ("medusa",)])
def test_sampled_first_two_tokens_follow_the_processed_target(decoder, drafters):
    """Lossless with respect to the processed distribution, and the test can tell it from the others."""
    models, prompt, n = decoder.models, looping_prompt(decoder), 1200 if drafters != ("medusa",) else 600
    sampling, repetition = SamplingSettings(temperature=1.5, top_k=4), RepetitionSettings(1.2, 2)
    exact = first_two_distribution(models, prompt, sampling, repetition)
    counts = Counter()
    for seed in range(n):
        _, end = run(decoder, prompt, drafters=drafters, k=2, max_new_tokens=2, verify="sample", sampling=sampling,
                     repetition=repetition, seed=seed)
        counts[tuple(end.token_ids)] += 1
    assert set(counts) <= set(exact)
    assert chi_square_pvalue(counts, exact, n) > P_MIN
    for partial in (RepetitionSettings(), RepetitionSettings(1.2, 0), RepetitionSettings(1.0, 2)):  # negative controls
        assert chi_square_pvalue(counts, first_two_distribution(models, prompt, sampling, partial), n) < P_MIN
