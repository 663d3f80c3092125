"""The static KV cache and compiled forwards (app/engine/runtime/execution.py, static_cache.py, cached_model.py).

The static path must change nothing a user sees but the speed: the same greedy ids as the dynamic path for
every drafter, K, live change and tree; cached logits equal to a full recompute after any rollback (a rollback
is a move of the write position there); and a compiled run, where the compiler works, gives the same ids too.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
import torch

from app.engine.core.tree import verification_parents
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import EndEvent, ExecutionMode, NoticeEvent, PassEvent, StartEvent, to_json_line
from app.engine.loading import load_models
from app.engine.loading import warm_up as warm_up_module
from app.engine.runtime import cached_model as cached_model_module
from app.engine.runtime.cached_model import CachedModel
from app.engine.runtime.execution import (
    DEFAULTS,
    FAST_PATH,
    Execution,
    check_execution,
    default_words,
    padded_rows,
    resolve_execution,
    settle_execution,
)
from app.engine.runtime.static_cache import MIN_CAPACITY
from app.engine.settings import DecodeSettings, SettingsError
from tests.engine.helpers import PROMPTS, run
from tests.engine.test_decoder import run_with_schedule
from tests.engine.test_tree import VOCAB, full_logits, random_tree, tiny_model
from tests.engine.test_warm_up import step_words

# Every drafter that runs on the bundled demo family (its learned heads included); the suffix tree is a
# lookup drafter like prompt lookup and the n-gram cache, with no model of its own to cache.
DRAFTERS = ("draft-model", "prompt-lookup", "ngram-cache", "layer-skip", "eagle", "medusa", "mtp", "dflash")
TREE_DRAFTERS = ("draft-model", "prompt-lookup", "layer-skip", "eagle", "medusa")
TOKENS = 40


@pytest.fixture(scope="module")
def demo():
    return load_models(device="cpu")  # the bundled family and its heads, offline


@pytest.fixture(scope="module")
def dynamic(demo):
    return SpeculativeDecoder(demo)


@pytest.fixture(scope="module")
def static(demo):
    """The same weights, run on static caches."""
    return SpeculativeDecoder(replace(demo, execution=Execution("static")))


def generation(decoder, prompt: str, settings: DecodeSettings) -> list:
    events = list(decoder.generate(prompt, settings))
    end = events[-1]
    assert isinstance(end, EndEvent) and end.reason != "error", getattr(end, "error", end)
    return events


# ---- the same ids ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_static_gives_the_dynamic_ids_for_every_drafter_and_k(dynamic, static, drafter, k):
    assert drafter in dynamic.models.available_drafters
    for prompt in PROMPTS[:2]:
        settings = DecodeSettings(drafters=(drafter,), k=k, max_new_tokens=TOKENS)
        expected = generation(dynamic, prompt, settings)
        events = generation(static, prompt, settings)
        assert events[-1].token_ids == expected[-1].token_ids, (drafter, k, prompt)
        assert [e.drafter for e in events if isinstance(e, PassEvent)] == \
            [e.drafter for e in expected if isinstance(e, PassEvent)]
        start = events[0]
        assert isinstance(start, StartEvent) and start.execution == ExecutionMode("static", compiled=False)
        assert not any(isinstance(e, NoticeEvent) for e in events)
    assert static.target.static and not dynamic.target.static


def test_rejected_drafts_are_rolled_back_on_the_static_path(dynamic, static):
    """The draft model of the demo family is often wrong: every rejection moves the write positions back."""
    settings = DecodeSettings(drafters=("draft-model",), k=5, max_new_tokens=64)
    events = generation(static, PROMPTS[1], settings)
    passes = [e for e in events if isinstance(e, PassEvent)]
    assert any(p.n_accepted < len(p.drafted) for p in passes)  # rollbacks happened
    assert events[-1].token_ids == generation(dynamic, PROMPTS[1], settings)[-1].token_ids
    ids = static.encode_prompt(PROMPTS[1]) + list(events[-1].token_ids)
    assert static.target.length == len(ids) - 1  # the invariant of §2 holds on the static cache
    assert int(static.target.cache.get_seq_length()) == len(ids) - 1  # and its write position with it


def test_live_k_and_drafter_changes_keep_the_dynamic_ids(dynamic, static):
    start = DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=64)
    schedule = {2: dict(drafters=("layer-skip",), k=2), 4: dict(drafters=(), k=1),
                6: dict(drafters=("prompt-lookup", "draft-model"), k=5), 8: dict(drafters=("eagle",), k=3),
                10: dict(drafters=("ngram-cache",), k=3, adaptive_k=True), 12: dict(drafters=("medusa",), k=1)}
    expected_passes, expected = run_with_schedule(dynamic, PROMPTS[0], start, schedule)
    passes, end = run_with_schedule(static, PROMPTS[0], start, schedule)
    assert end.reason == expected.reason == "max_tokens"
    assert end.token_ids == expected.token_ids
    assert [(p.drafter, p.k) for p in passes] == [(p.drafter, p.k) for p in expected_passes]


def test_the_context_end_is_reached_with_the_dynamic_ids(tiny_llama):
    target, draft = tiny_llama
    ends = []
    for cache in ("dynamic", "static"):
        models = load_models(str(target), str(draft), device="cpu", cache=cache)
        models.target.config.max_position_embeddings = 40
        decoder = SpeculativeDecoder(models)
        _, end = run(decoder, PROMPTS[0], drafters=("draft-model",), k=5, max_new_tokens=100)
        assert end.reason == "context_full" and decoder.target.static == (cache == "static")
        ends.append(end.token_ids)
    assert ends[0] == ends[1]


def test_the_start_event_says_how_the_target_runs(static):
    start = generation(static, PROMPTS[0], DecodeSettings(drafters=(), max_new_tokens=2))[0]
    assert json.loads(to_json_line(start))["execution"] == {"cache": "static", "compiled": False}


# ---- the cache against a full recompute -------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_static_cache_after_random_rollbacks_and_trees_equals_a_recompute(arch):
    model, rng = tiny_model(arch, seed=3), random.Random(arch)
    cached = CachedModel(model, execution=Execution("static"))
    assert cached.static
    ids = torch.tensor([rng.randrange(VOCAB) for _ in range(50)])  # close to the first capacity, to outgrow it
    capacities = set()
    for _ in range(40):
        drafts = torch.tensor([rng.randrange(VOCAB) for _ in range(rng.randrange(0, 7))], dtype=torch.long)
        block = cached.advance_to(torch.cat([ids, drafts]))  # (T, V)
        assert torch.allclose(block, full_logits(model, torch.cat([ids, drafts]))[-block.shape[0]:], atol=1e-4)
        accepted = rng.randrange(0, drafts.numel() + 1)
        ids = torch.cat([ids, drafts[:accepted], torch.tensor([rng.randrange(VOCAB)])])
        cached.crop(ids.numel() - 1)  # a rollback: the write position moves back
        if rng.random() < 0.4:  # a token tree, then its accepted path kept in place
            tree = random_tree(rng, rng.randrange(1, 12))
            logits = cached.extend_tree(torch.cat([ids[-1:], tree.tokens]), verification_parents(tree))
            node = rng.randrange(len(tree))
            path_ids = torch.cat([ids, tree.tokens[tree.path_to(node)]])
            assert torch.allclose(logits[node + 1], full_logits(model, path_ids)[-1], atol=1e-4)
            path = tree.path_to(node)[: rng.randrange(0, 4)]
            cached.keep_path([0] + [n + 1 for n in path])
            ids = torch.cat([ids, tree.tokens[path], torch.tensor([rng.randrange(VOCAB)])])
        if rng.random() < 0.1:  # a deeper rollback, as a drafter switched on mid-run sees
            ids = ids[: rng.randrange(ids.numel() // 2, ids.numel())]
            cached.crop(ids.numel() - 1)
        assert cached.length == int(cached.cache.get_seq_length()) == ids.numel() - 1
        assert torch.equal(cached.ids, ids[:-1])
        capacities.add(cached.cache.layers[0].keys.shape[-2])  # the buffers' capacity (any 5.x release)
    assert torch.allclose(cached.advance_to(ids)[-1], full_logits(model, ids)[-1], atol=1e-4)
    assert len(capacities) >= 2 and min(capacities) == MIN_CAPACITY  # it grew, keeping what it held


def test_a_layer_subset_rolls_back_on_its_own_static_cache():
    model = tiny_model("llama", seed=4)
    cached = CachedModel(model, layers=[0], execution=Execution("static"))
    ids = torch.arange(1, 30)
    cached.advance_to(ids[:20])
    cached.crop(12)
    logits = cached.advance_to(ids[:25])
    with torch.inference_mode(), cached_model_module.only_layers(model, [0]):
        full = model(ids[None, :25]).logits[0]
    assert torch.allclose(logits, full[12:], atol=1e-4)
    assert [layer.is_initialized for layer in cached.cache.layers] == [True, False]  # only the layer that runs


# ---- token trees ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("drafter", TREE_DRAFTERS)
def test_token_trees_on_the_static_path_keep_the_chain_ids(dynamic, static, drafter):
    assert static.target.tree_problem() is None  # the static path takes tree masks: no chain fallback
    chain = DecodeSettings(drafters=(drafter,), k=4, max_new_tokens=TOKENS)
    expected = generation(dynamic, PROMPTS[2], chain)[-1].token_ids
    events = generation(static, PROMPTS[2], replace(chain, tree=12))
    assert events[-1].token_ids == expected
    assert not any(isinstance(e, NoticeEvent) for e in events)
    assert any(p.tree for p in events if isinstance(p, PassEvent))


# ---- what the static path refuses, and the choice itself -------------------------------------------------------


def sliding_model():
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model("qwen2", vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                                  max_position_embeddings=256, use_sliding_window=True, sliding_window=8,
                                  max_window_layers=0)
    return AutoModelForCausalLM.from_config(config).eval()


def test_a_sliding_window_model_keeps_the_dynamic_cache_with_a_notice():
    model = sliding_model()
    execution = Execution("static")
    cached = CachedModel(model, execution=execution, role="draft-model drafter")
    assert not cached.static
    assert execution.notices and "sliding-window" in execution.notices[0]
    assert "the draft-model drafter keeps the dynamic cache" in execution.notices[0]
    ids = torch.arange(1, 20)
    assert torch.allclose(cached.advance_to(ids), full_logits(model, ids), atol=1e-4)
    target = Execution("static", compile=True)
    settle_execution(target, model)  # the target: every model falls back, said once
    assert (target.cache, target.compile) == ("dynamic", False) and len(target.notices) == 1


def test_cuda_runs_the_fast_path_by_default_and_every_other_device_eagerly_on_the_dynamic_cache():
    assert DEFAULTS == {"cuda": FAST_PATH}
    for device in ("cpu", "mps"):
        assert resolve_execution(None, None, torch.device(device)) == Execution("dynamic", False)
    for device in ("cpu", "mps", "cuda"):
        assert resolve_execution("static", False, torch.device(device)) == Execution("static", False)
        assert resolve_execution(None, True, torch.device(device)) == Execution("static", True)  # implies static
        assert resolve_execution("static", True, torch.device(device)) == Execution("static", True)  # opts in
    assert resolve_execution(None, None, torch.device("cuda")) == Execution("static", True)
    assert resolve_execution("static", None, torch.device("cuda")) == Execution("static", True)
    # eager stays one choice away on CUDA: the dynamic cache alone means eager forwards, and so does --no-compile
    assert resolve_execution("dynamic", None, torch.device("cuda")) == Execution("dynamic", False)
    assert resolve_execution("dynamic", False, torch.device("cuda")) == Execution("dynamic", False)
    assert resolve_execution(None, False, torch.device("cuda")) == Execution("static", False)
    assert default_words(0) == "CUDA: static, elsewhere: dynamic" and default_words(1) == "CUDA: on, elsewhere: off"
    with pytest.raises(SettingsError, match="compiling needs the static cache"):
        check_execution("dynamic", True)
    with pytest.raises(SettingsError, match="unknown cache"):
        load_models(device="cpu", cache="paged")
    assert [padded_rows(n) for n in (1, 2, 3, 5, 8, 9)] == [1, 2, 4, 8, 8, 16]


# ---- compiled forwards ------------------------------------------------------------------------------------------


def test_a_failed_compile_falls_back_to_eager_forwards_with_a_notice(demo, dynamic, monkeypatch):
    def broken(step, device):
        def fail(*args, **kwargs):
            raise RuntimeError("no C++ compiler found\nmore lines")
        return fail

    monkeypatch.setattr(cached_model_module, "compile_step", broken)
    compiled = SpeculativeDecoder(replace(demo, execution=Execution("static", compile=True)))
    settings = DecodeSettings(drafters=("draft-model",), k=3, max_new_tokens=24)
    events = generation(compiled, PROMPTS[0], settings)
    assert events[0].execution == ExecutionMode("static", compiled=True)  # what was in force at the start
    notices = [e.message for e in events if isinstance(e, NoticeEvent)]
    assert notices == ["compiling the forwards failed (RuntimeError: no C++ compiler found); they run eagerly "
                       "instead"]
    assert events[-1].token_ids == generation(dynamic, PROMPTS[0], settings)[-1].token_ids
    again = generation(compiled, PROMPTS[0], settings)
    assert again[0].execution == ExecutionMode("static", compiled=False)
    assert not any(isinstance(e, NoticeEvent) for e in again) and again[-1].token_ids == events[-1].token_ids


@pytest.mark.slow
def test_compiled_steps_compile_once_per_shape_for_the_target_and_the_drafters(demo, dynamic, counted_compiles):
    """Traced by dynamo with a backend that runs the graphs eagerly (quick, no C++ compiler): the same ids, and a
    second round of the same generations compiles nothing more (the caches, masks and padded rows keep their
    guards: no shape is compiled twice)."""
    counter = counted_compiles
    compiled = SpeculativeDecoder(replace(demo, execution=Execution("static", compile=True)))
    runs = [DecodeSettings(drafters=(drafter,), k=3, max_new_tokens=24, tree=tree)
            for drafter in ("draft-model", "layer-skip") for tree in (None, 6)]
    for settings in runs:
        compiled.forget_caches()
        events = generation(compiled, PROMPTS[0], settings)
        assert events[-1].token_ids == generation(dynamic, PROMPTS[0], replace(settings, tree=None))[-1].token_ids
        assert not any(isinstance(e, NoticeEvent) for e in events)
    frames = counter.frame_count  # one per model (target, draft model, layer subset) and shape met
    assert 0 < frames <= 16 and compiled.target.compiled
    for settings in runs:  # the same shapes again: every one is recognised
        compiled.forget_caches()
        generation(compiled, PROMPTS[0], settings)
    assert counter.frame_count == frames
    torch.compiler.reset()


@pytest.fixture(scope="module")
def compiler():
    """Skip where torch.compile cannot build code for this CPU (no C++ compiler, an unsupported platform)."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch(compile_threads=1):  # no worker pool: nothing left running after the test
        try:
            torch.compile(lambda x: x * 2 + 1)(torch.ones(3))
        except Exception as exc:  # noqa: BLE001 - whatever the reason, the compiled test cannot run here
            pytest.skip(f"torch.compile does not work on this machine ({type(exc).__name__}: {exc})")
        yield


@pytest.mark.slow
def test_a_compiled_run_on_the_cpu_gives_the_eager_ids(compiler, tiny_llama, monkeypatch):
    """Prompt lookup at K = 2: one-token steps and verification blocks of 2 and 3 rows (3 padded to 4), compiled
    for real while the models load (the warm-up cut to those shapes: each takes tens of seconds here), and
    nothing compiled again by the generations."""
    from torch._dynamo.utils import counters

    target, draft = tiny_llama
    eager = SpeculativeDecoder(load_models(str(target), device="cpu"))
    whole_plan = warm_up_module.warm_up_plan
    monkeypatch.setattr(warm_up_module, "warm_up_plan",
                        lambda models: [replace(whole_plan(models)[0], buckets=[1, 2, 4])])
    steps = []
    compiled = SpeculativeDecoder(load_models(str(target), device="cpu", compile=True,
                                              progress=lambda fraction, message: steps.append(message)))
    assert compiled.models.execution == Execution("static", compile=True)
    assert [step_words(message) for message in steps if message.startswith("compiling")] == [
        "compiling target: one-token step (1/3)", "compiling target: verify 2 rows (2/3)",
        "compiling target: verify 4 rows (3/3)"]
    compiled_at_load = counters["frames"]["ok"]
    for prompt in PROMPTS[:2]:
        settings = DecodeSettings(drafters=("prompt-lookup",), k=2, max_new_tokens=24)
        events = generation(compiled, prompt, settings)
        assert events[0].execution == ExecutionMode("static", compiled=True)
        assert not any(isinstance(e, NoticeEvent) for e in events), compiled.models.execution.compile_failure
        assert events[-1].token_ids == generation(eager, prompt, settings)[-1].token_ids
    assert compiled.target.compiled
    assert counters["frames"]["ok"] == compiled_at_load  # the load compiled every shape these runs met
