"""The compiled path's warm-up at load (app/engine/loading/warm_up.py `warm_up`, `CachedModel.warm_up`).

Loading with compile on compiles every shape a generation meets, step by step with progress, through the step
the decoder runs; later generations compile nothing more and give the eager ids. A compile that fails falls
back to eager forwards with a notice and the load completes; a load cancelled between two steps stops there.
These tests trace with dynamo's counting backend, or replace the compiler, so nothing is compiled for real
(the one real compile on the CPU is in test_static_cache.py).
"""

from __future__ import annotations

import re

import pytest
import torch

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.engine import ModelsSummary
from app.engine.events import EndEvent, ExecutionMode, NoticeEvent
from app.engine.loading import load_models
from app.engine.loading.warm_up import LOADING_SHARE, warm_up_plan
from app.engine.runtime import cached_model as cached_model_module
from app.engine.runtime.cached_model import CachedModel
from app.engine.runtime.execution import Execution, compiles_graph, fewest_rows, padded_rows, row_buckets
from app.engine.settings import MAX_K, DecodeSettings
from tests.engine.helpers import PROMPTS
from tests.engine.test_tree import VOCAB, full_logits, tiny_model

STEP = re.compile(r"^compiling (target|draft model|layer skip \(\d+ layers\)): "
                  r"(one-token step|verify \d+ rows|catch-up 2 rows|tree round \d+ rows) \((\d+)/(\d+)\)"
                  r"(, about \d+ (s|min) left)?$")
LEFT = re.compile(r", about \d+ (s|min) left$")


def step_words(message: str) -> str:
    """A progress message without its time left (which the machine's speed decides)."""
    return LEFT.sub("", message)
# What the first generations meet: each drafter that runs a model, chains and trees, K small and large.
RUNS = [DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=32),
        DecodeSettings(drafters=("layer-skip",), k=3, max_new_tokens=32),
        DecodeSettings(drafters=("draft-model",), k=3, max_new_tokens=32, tree=12),
        DecodeSettings(drafters=("layer-skip",), k=2, max_new_tokens=24, tree=6),
        DecodeSettings(drafters=("prompt-lookup",), k=MAX_K, max_new_tokens=32),
        DecodeSettings(drafters=(), max_new_tokens=8)]


def ids_of(decoder: SpeculativeDecoder, settings: DecodeSettings) -> tuple[list[int], list[str]]:
    events = list(decoder.generate(PROMPTS[0], settings))
    end = events[-1]
    assert isinstance(end, EndEvent) and end.reason != "error", getattr(end, "error", end)
    return list(end.token_ids), [e.message for e in events if isinstance(e, NoticeEvent)]


@pytest.fixture(scope="module")
def eager(tiny_llama):
    target, draft = tiny_llama
    return SpeculativeDecoder(load_models(str(target), str(draft), device="cpu"))


def stub_compiler(monkeypatch, step_for=None) -> list[tuple[int, ...]]:
    """Replace the compiler: `step_for(step)` (default: the step itself) is the "compiled" step; returns the shapes
    of the input ids each compiled call was fed."""
    fed: list[tuple[int, ...]] = []

    def compile_step(step, device):
        run = step_for(step) if step_for else step

        def compiled(input_ids, *args, **kwargs):
            fed.append(tuple(input_ids.shape))
            return run(input_ids, *args, **kwargs)
        return compiled

    monkeypatch.setattr(cached_model_module, "compile_step", compile_step)
    return fed


@pytest.mark.slow
def test_the_load_compiles_every_shape_with_progress_and_generations_compile_nothing_more(
        tiny_llama, eager, counted_compiles):
    target, draft = tiny_llama
    reports: list[tuple[float, str]] = []
    models = load_models(str(target), str(draft), device="cpu", compile=True,
                         progress=lambda fraction, message: reports.append((fraction, message)))
    plan = warm_up_plan(models)
    assert [entry.who for entry in plan] == ["target", "draft model", "layer skip (2 layers)"]
    assert plan[0].buckets == [1, 2, 4, 8, 16, 32, 64, 128]  # K up to MAX_K, trees up to COMPILED_ROWS rows
    assert plan[1].buckets == plan[2].buckets == [1, 2, 4, 8]  # one-token steps, a catch-up, tree rounds
    steps = [(fraction, STEP.match(message)) for fraction, message in reports if message.startswith("compiling")]
    total = sum(len(entry.buckets) for entry in plan)
    assert len(steps) == total and all(match for _, match in steps), reports
    assert [int(match[3]) for _, match in steps] == list(range(1, total + 1))
    assert {int(match[4]) for _, match in steps} == {total}
    assert [bool(match[5]) for _, match in steps] == [False] + [True] * (total - 1)  # once a step has ended
    assert [step_words(match[0]) for _, match in steps][:3] == [
        "compiling target: one-token step (1/16)", "compiling target: verify 2 rows (2/16)",
        "compiling target: verify 4 rows (3/16)"]
    fractions = [fraction for fraction, _ in reports]
    assert fractions == sorted(fractions) and steps[0][0] == pytest.approx(LOADING_SHARE)
    assert reports[-1] == (1.0, "ready")
    compiled_at_load = counted_compiles.frame_count
    # Two graphs per model: the one-token step, and one for every bucket of two rows or more (their row count a
    # symbol); the other buckets' warm-ups compile nothing.
    assert compiled_at_load == 2 * len(plan)
    assert ModelsSummary.of(models).execution == "static cache, compiled"

    decoder = SpeculativeDecoder(models)
    for settings in RUNS:
        decoder.forget_caches()
        ids, notices = ids_of(decoder, settings)
        assert not notices and ids == ids_of(eager, settings)[0], settings
    assert counted_compiles.frame_count == compiled_at_load  # every shape met was compiled at load
    assert decoder.target.compiled and models.execution.compile_failure is None


def test_a_warm_up_step_runs_the_compiled_step_padded_and_leaves_the_cache_empty(monkeypatch):
    fed = stub_compiler(monkeypatch)
    model = tiny_model("llama", seed=5)
    cached = CachedModel(model, execution=Execution("static", compile=True))
    cached.warm_up(fewest_rows(8))
    assert fed == [(1, 8)]  # 5 rows padded to 8; the first forward, which allocated the cache, ran eagerly
    assert cached.length == 0 and int(cached.cache.get_seq_length()) == 0
    ids = torch.arange(3, 40) % VOCAB
    assert torch.allclose(cached.advance_to(ids), full_logits(model, ids), atol=1e-4)  # nothing left behind
    cached.warm_up(1)
    assert fed[-1] == (1, 1) and cached.length == 0
    assert [fewest_rows(bucket) for bucket in (1, 2, 4, 8, 128)] == [1, 2, 3, 5, 65]
    assert all(padded_rows(fewest_rows(bucket)) == bucket for bucket in row_buckets(200))


def test_a_compile_failure_during_the_warm_up_falls_back_to_eager_and_the_load_completes(
        tiny_llama, eager, monkeypatch):
    def broken(step):
        def fail(*args, **kwargs):
            raise RuntimeError("no C++ compiler found\nmore lines")
        return fail

    fed = stub_compiler(monkeypatch, broken)
    target, draft = tiny_llama
    messages: list[str] = []
    models = load_models(str(target), str(draft), device="cpu", compile=True,
                         progress=lambda fraction, message: messages.append(message))
    assert len(fed) == 1  # the first step failed; no other was tried
    assert messages[-3:] == ["compiling target: one-token step (1/16)", "compiling failed: the models run eagerly",
                             "ready"]
    assert models.execution.compile_failure == "RuntimeError: no C++ compiler found"
    assert ModelsSummary.of(models).execution == "static cache"
    decoder = SpeculativeDecoder(models)
    settings = DecodeSettings(drafters=("draft-model",), k=3, max_new_tokens=24)
    events = list(decoder.generate(PROMPTS[0], settings))
    assert events[0].execution == ExecutionMode("static", compiled=False)
    assert [e.message for e in events if isinstance(e, NoticeEvent)] == [
        "compiling the forwards failed (RuntimeError: no C++ compiler found); they run eagerly instead"]
    assert list(events[-1].token_ids) == ids_of(eager, settings)[0]
    assert len(fed) == 1  # nothing is compiled any more


class Cancelled(Exception):
    pass


def test_a_load_cancelled_between_compile_steps_stops_there(tiny_llama, monkeypatch):
    fed = stub_compiler(monkeypatch)
    target, draft = tiny_llama
    steps: list[str] = []

    def progress(fraction: float, message: str) -> None:
        if message.startswith("compiling"):
            steps.append(message)
            if len(steps) == 3:
                raise Cancelled  # as the window's load thread does once it is cancelled

    with pytest.raises(Cancelled):
        load_models(str(target), str(draft), device="cpu", compile=True, progress=progress)
    assert fed == [(1, 1), (1, 2)]  # the two steps before the cancel, and none after
    assert step_words(steps[-1]) == "compiling target: verify 4 rows (3/16)"


def test_the_time_left_counts_each_kind_of_step_at_the_mean_time_of_its_own_kind():
    from app.engine.loading.warm_up import StepClock, time_left

    assert time_left(StepClock(6), StepClock(10)) == ""  # nothing to go by before the first compile ends
    assert time_left(StepClock(6, 2, 20.0), StepClock(10)) == ", about 40 s left"  # runs not seen yet: free
    assert time_left(StepClock(6, 2, 20.0), StepClock(10, 5, 5.0)) == ", about 45 s left"
    assert time_left(StepClock(6, 6, 60.0), StepClock(10, 5, 5.0)) == ", about 5 s left"
    assert time_left(StepClock(16, 4, 10.0), StepClock(0)) == ", about 30 s left"
    assert time_left(StepClock(16, 2, 40.0), StepClock(0)) == ", about 5 min left"
    assert compiles_graph(1, [1, 2, 4, 8]) and compiles_graph(2, [1, 2, 4, 8])
    assert not compiles_graph(4, [1, 2, 4, 8]) and compiles_graph(4, [1, 4, 8])
    assert step_words("compiling target: verify 2 rows (2/16), about 70 s left") == \
        "compiling target: verify 2 rows (2/16)"
