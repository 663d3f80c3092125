"""The pass loop: greedy identity, live changes, control, events."""

from __future__ import annotations

import pytest
import torch

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import ACCEPTED, ASD_EXCEPTION, BONUS, TARGET, EndEvent, PassEvent, StartEvent
from app.engine.loading import load_models
from app.engine.settings import AsdSettings, DecodeSettings, GenerationControl, LiveSettings, SamplingSettings
from tests.engine.helpers import PROMPTS, run

DRAFTER_SETS = [("draft-model",), ("prompt-lookup",), ("ngram-cache",), ("layer-skip",),
                ("prompt-lookup", "draft-model"), ("ngram-cache", "layer-skip")]


@pytest.fixture(scope="module", params=["tiny_llama", "tiny_qwen2", "tiny_gpt2"])
def decoder(request):
    target, draft = request.getfixturevalue(request.param)
    return SpeculativeDecoder(load_models(str(target), str(draft)))


def hf_greedy(models, prompt: str, n: int) -> list[int]:
    ids = models.tokenizer(prompt, return_tensors="pt").input_ids
    out = models.target.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0,
                                 min_new_tokens=n)
    return out[0, ids.shape[1]:].tolist()


def test_plain_decoding_equals_hf_greedy(decoder):
    for prompt in PROMPTS[:2]:
        passes, end = run(decoder, prompt, drafters=(), max_new_tokens=48)
        assert list(end.token_ids) == hf_greedy(decoder.models, prompt, len(end.token_ids))
        assert all(p.appended.kind == TARGET and not p.drafted for p in passes)


IDENTITY_CASES = [("tiny_llama", 1), ("tiny_llama", 3), ("tiny_llama", 5), ("tiny_qwen2", 3), ("tiny_gpt2", 4)]


@pytest.mark.parametrize("arch,k", IDENTITY_CASES)
def test_greedy_speculative_equals_autoregressive(request, arch, k):
    target, draft = request.getfixturevalue(arch)
    decoder = SpeculativeDecoder(load_models(str(target), str(draft)))
    prompts = PROMPTS if arch == "tiny_llama" else PROMPTS[:2]
    for prompt in prompts:
        _, plain = run(decoder, prompt, drafters=(), max_new_tokens=64)
        for drafters in DRAFTER_SETS:
            passes, spec = run(decoder, prompt, drafters=drafters, k=k, max_new_tokens=64)
            assert spec.token_ids == plain.token_ids, (drafters, k)
            assert sum(len(p.committed_ids) for p in passes) == len(spec.token_ids)
            assert all(1 <= len(p.committed_ids) <= k + 1 for p in passes[:-1])


def test_committed_texts_concatenate_to_the_text(decoder):
    passes, end = run(decoder, PROMPTS[0], drafters=("prompt-lookup",), max_new_tokens=40)
    pieces = []
    for p in passes:
        pieces += [t.text for t in p.drafted if t.outcome == ACCEPTED]
        pieces += [p.appended.text] if p.appended else []
    assert "".join(pieces) == decoder.models.tokenizer.decode(list(end.token_ids))


def run_with_schedule(decoder, prompt: str, start: DecodeSettings, schedule: dict) -> tuple[list[PassEvent], EndEvent]:
    """Generate, applying `schedule[i]` to the live settings when pass i has been seen."""
    live = LiveSettings(start)
    seen = []
    for event in decoder.generate(prompt, live):
        if isinstance(event, PassEvent):
            seen.append(event)
            if event.index in schedule:
                live.update(**schedule[event.index])
    assert isinstance(event, EndEvent)
    return seen, event


def test_live_drafter_and_k_changes_apply_at_the_next_pass_and_keep_greedy_identity(decoder):
    prompt = PROMPTS[0]
    _, plain = run(decoder, prompt, drafters=(), max_new_tokens=64)
    schedule = {3: dict(drafters=("layer-skip",), k=2), 6: dict(drafters=(), k=1),
                9: dict(drafters=("prompt-lookup", "draft-model"), k=5),
                12: dict(drafters=("ngram-cache",), k=3, adaptive_k=True)}
    seen, end = run_with_schedule(decoder, prompt, DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=64),
                                  schedule)
    assert end.reason == "max_tokens"
    assert seen[4].drafter in ("layer-skip", None) and seen[4].k <= 2
    assert seen[7].drafter is None and seen[7].k == 0
    assert seen[10].drafter in ("prompt-lookup", "draft-model")
    assert all(p.drafter in ("ngram-cache", None) for p in seen[13:])
    assert end.token_ids == plain.token_ids


def test_switching_to_asd_and_back_mid_run_keeps_one_request_ledger(decoder):
    prompt = PROMPTS[0]
    _, plain = run(decoder, prompt, drafters=(), max_new_tokens=64)
    asd = dict(budget=50.0, gate=5.0, cap=4)  # generous: the tiny random models rarely agree
    schedule = {3: dict(verify="asd", asd=asd), 9: dict(verify="greedy")}
    seen, end = run_with_schedule(decoder, prompt, DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=64),
                                  schedule)
    assert end.reason == "max_tokens"
    assert [p.verify for p in seen[:10]] == ["greedy"] * 4 + ["asd"] * 6
    assert all(p.verify == "greedy" for p in seen[10:])
    # Greedy identity holds up to the first ASD pass.
    switch = seen[4].position
    assert end.token_ids[:switch] == plain.token_ids[:switch]
    # One ledger for the whole request: charged only by ASD passes, never beyond B, kept after switching back.
    exceptions, spent = 0, 0.0
    for p in seen:
        kept_exceptions = [t for t in p.drafted if t.outcome == ASD_EXCEPTION]
        assert p.verify == "asd" or not kept_exceptions
        exceptions += len(kept_exceptions)
        assert p.ledger.exceptions == exceptions
        assert p.ledger.spent == pytest.approx(spent + sum(t.regret for t in kept_exceptions))
        spent = p.ledger.spent
        assert p.ledger.budget == (asd["budget"] if p.verify == "asd" else 0.0)
        assert spent <= asd["budget"] + 1e-9
        if p.verify == "asd":
            charged = sum(t.regret for t in kept_exceptions)
            assert p.detail.asd_remaining == pytest.approx(asd["budget"] - (spent - charged))


def test_identical_drafter_has_every_draft_accepted(tiny_llama):
    target, _ = tiny_llama
    decoder = SpeculativeDecoder(load_models(str(target), str(target)))
    passes, end = run(decoder, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=40)
    assert end.stats.alpha == 1.0
    assert all(p.appended.kind == BONUS for p in passes if p.appended and p.drafted)
    passes, end = run(decoder, PROMPTS[1], drafters=("draft-model",), k=4, max_new_tokens=40, verify="sample",
                      seed=3)
    assert end.stats.alpha == 1.0


def test_same_seed_same_sampled_text(decoder):
    settings = dict(drafters=("draft-model",), verify="sample", sampling=SamplingSettings(0.9), max_new_tokens=30,
                    seed=11)
    _, first = run(decoder, PROMPTS[2], **settings)
    _, second = run(decoder, PROMPTS[2], **settings)
    assert first.token_ids == second.token_ids


def test_events_describe_the_run(decoder):
    events = list(decoder.generate(PROMPTS[0], DecodeSettings(drafters=("prompt-lookup",), max_new_tokens=20)))
    assert isinstance(events[0], StartEvent) and isinstance(events[-1], EndEvent)
    passes = [e for e in events if isinstance(e, PassEvent)]
    assert [p.index for p in passes] == list(range(len(passes)))
    assert events[-1].passes == len(passes)
    positions = [p.position for p in passes]
    assert positions == sorted(positions) and positions[0] == 0
    for p in passes:
        assert p.timing.total_ms >= p.timing.draft_ms + p.timing.verify_ms - 1e-6
        assert all(0.0 <= t.p <= 1.0 for t in p.drafted)
        assert p.detail is not None and len(p.detail.p_top) == len(p.drafted) + 1


def test_stop_pause_and_step(tiny_llama):
    target, draft = tiny_llama
    decoder = SpeculativeDecoder(load_models(str(target), str(draft)))
    control = GenerationControl()
    control.pause()
    control.step()
    control.step()
    stream = decoder.generate(PROMPTS[0], DecodeSettings(max_new_tokens=50), control)
    assert isinstance(next(stream), StartEvent)
    assert isinstance(next(stream), PassEvent)
    assert isinstance(next(stream), PassEvent)
    control.stop()
    end = next(stream)
    assert isinstance(end, EndEvent) and end.reason == "stopped" and end.passes == 2
    assert len(end.token_ids) >= 2


def test_eos_ends_the_generation(tiny_llama):
    target, draft = tiny_llama
    models = load_models(str(target), str(draft))
    decoder = SpeculativeDecoder(models)
    _, plain = run(decoder, PROMPTS[1], drafters=(), max_new_tokens=12)
    stopper = plain.token_ids[5]
    models.target.generation_config.eos_token_id = stopper
    decoder = SpeculativeDecoder(models)
    try:
        for drafters in [(), ("prompt-lookup",), ("draft-model",)]:
            _, end = run(decoder, PROMPTS[1], drafters=drafters, max_new_tokens=12)
            first = list(plain.token_ids).index(stopper)
            assert end.reason == "eos" and list(end.token_ids) == list(plain.token_ids[: first + 1])
    finally:
        models.target.generation_config.eos_token_id = models.tokenizer.eos_token_id


def test_context_full_ends_with_text_kept(tiny_llama):
    target, draft = tiny_llama
    models = load_models(str(target), str(draft))
    models.target.config.max_position_embeddings = 40
    decoder = SpeculativeDecoder(models)
    passes, end = run(decoder, PROMPTS[0], drafters=("draft-model",), k=5, max_new_tokens=100)
    assert end.reason == "context_full"
    assert len(models.tokenizer(PROMPTS[0]).input_ids) + len(end.token_ids) == 40 + 1  # the last one is never fed
    assert torch.tensor(end.token_ids).numel() > 0


def test_adaptive_k_grows_after_full_acceptance_and_shrinks_after_a_rejection(tiny_llama):
    target, draft = tiny_llama
    decoder = SpeculativeDecoder(load_models(str(target), str(draft)))
    passes, _ = run(decoder, PROMPTS[1], drafters=("prompt-lookup", "draft-model"), k=2, adaptive_k=True, k_min=1,
                    k_max=7, max_new_tokens=60)
    for before, after in zip(passes, passes[1:], strict=False):
        if not before.drafted or after.k == 0:
            continue
        expected = min(before.k + 2, 7) if before.n_accepted == len(before.drafted) else max(before.k - 1, 1)
        remaining = 60 - after.position - 1
        assert after.k == min(expected, remaining), (before.index, before.k, after.k)


def test_asd_events_count_reuse_and_savings_and_b0_counts_none(decoder):
    prompt = PROMPTS[0]
    passes, end = run(decoder, prompt, drafters=("draft-model",), k=4, max_new_tokens=48, verify="asd",
                      asd=AsdSettings(500.0, 100.0, 4))  # generous: the tiny random models rarely agree
    saved = reused = 0
    for p in passes:
        kept = [t for t in p.drafted if t.outcome in (ACCEPTED, ASD_EXCEPTION)]
        strict = next((i for i, t in enumerate(p.drafted) if t.id != t.target_id), len(p.drafted))
        first = next((i for i, t in enumerate(kept) if t.outcome == ASD_EXCEPTION), len(kept))
        assert p.asd_saved == max(0, len(kept) - strict)
        assert p.asd_reused == sum(t.outcome == ACCEPTED for t in kept[first + 1:])
        saved, reused = saved + p.asd_saved, reused + p.asd_reused
    summary = end.asd
    assert summary is not None and summary.saved == saved and summary.reused == reused
    assert summary.saved == summary.exceptions + summary.reused and summary.exceptions == passes[-1].ledger.exceptions
    assert summary.spent == passes[-1].ledger.spent and summary.remaining == pytest.approx(500.0 - summary.spent)
    strict_tokens = len(end.token_ids) - saved
    assert summary.passes_saved == pytest.approx(len(passes) * saved / strict_tokens)
    mismatched = any(t.id != t.target_id for p in passes for t in p.drafted)
    assert summary.exceptions > 0 or not mismatched  # the generous knobs accept mismatches where there are any
    # B = 0: strict greedy, nothing saved or reused; outside ASD the fields are absent.
    passes, end = run(decoder, prompt, drafters=("draft-model",), k=4, max_new_tokens=24, verify="asd",
                      asd=AsdSettings(0.0, 5.0, 4))
    assert all(p.asd_saved == 0 and p.asd_reused == 0 for p in passes)
    assert (end.asd.exceptions, end.asd.saved, end.asd.reused, end.asd.passes_saved, end.asd.spent) == (0, 0, 0, 0, 0)
    passes, end = run(decoder, prompt, drafters=("draft-model",), k=4, max_new_tokens=8)
    assert end.asd is None and all(p.asd_saved is None and p.asd_reused is None for p in passes)
