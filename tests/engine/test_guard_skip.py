"""Compiled steps skip dynamo's guard evaluation once a call like theirs has run (execution.py `run_warm`).

The check of our own that stands in for the guards: the model, its layer subset, the inputs' shapes, dtypes and
device, the hidden-states flag and the cache's capacity. A call that differs in any of them evaluates every guard
(and compiles when it must); an equal call runs under `skip_guard_eval_unsafe`. Dynamo traces with a counting
backend that runs the graphs eagerly, so nothing is compiled for real.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo import eval_frame

from app.engine.runtime.cached_model import CachedModel
from app.engine.runtime.execution import Execution, run_warm, warm_call
from tests.engine.test_tree import full_logits, tiny_model


def inputs(rows: int = 4, capacity: int = 64, dtype=torch.float32, hidden: bool = True) -> tuple:
    return (torch.zeros(1, rows, dtype=torch.long), torch.zeros(1, rows, dtype=torch.long),
            torch.zeros(1, 1, rows, capacity, dtype=dtype), hidden)


def test_the_check_tells_apart_every_call_that_needs_another_graph():
    model, other = tiny_model("llama", seed=1), tiny_model("llama", seed=2)
    call = warm_call(model, None, inputs(), 64)
    assert warm_call(model, None, inputs(), 64) == call  # fresh tensors, the same shapes: the same graph
    others = [warm_call(other, None, inputs(), 64), warm_call(model, (0,), inputs(), 64),
              warm_call(model, None, inputs(rows=8), 64), warm_call(model, None, inputs(capacity=128), 128),
              warm_call(model, None, inputs(dtype=torch.bfloat16), 64),
              warm_call(model, None, inputs(hidden=False), 64), warm_call(model, None, inputs(), 128)]
    assert call not in others and len(set(others)) == len(others)


def test_only_a_call_that_ran_before_skips_the_guards():
    stances: list[bool] = []

    def step(*args):
        stances.append(eval_frame._stance.skip_guard_eval_unsafe)  # noqa: SLF001 - torch says it nowhere public
        return len(args)

    execution, model = Execution("static", compile=True), tiny_model("llama")
    for capacity in (64, 64, 128, 64, 128):
        assert run_warm(step, execution, warm_call(model, None, inputs(capacity=capacity), capacity),
                        inputs(capacity=capacity)) == 4
    assert stances == [False, True, False, True, True]
    assert not eval_frame._stance.skip_guard_eval_unsafe  # noqa: SLF001 - the stance ends with the call


def test_a_warm_call_that_dynamo_would_compile_again_runs_with_every_guard():
    ran: list[bool] = []

    def step(*args):
        skipping = eval_frame._stance.skip_guard_eval_unsafe  # noqa: SLF001 - torch says it nowhere public
        ran.append(skipping)
        if skipping:  # what dynamo raises when a guard the skipping left out has failed
            raise RuntimeError("Recompilation triggered with skip_guard_eval_unsafe stance.")
        return "out"

    execution, model = Execution("static", compile=True), tiny_model("llama")
    call = warm_call(model, None, inputs(), 64)
    assert [run_warm(step, execution, call, inputs()) for _ in range(2)] == ["out", "out"]
    assert ran == [False, True, False] and call in execution.warm_calls

    def broken(*args):
        raise RuntimeError("out of kernels")

    with pytest.raises(RuntimeError, match="out of kernels"):  # any other failure is the caller's to handle
        run_warm(broken, execution, call, inputs())


def test_warm_calls_skip_the_guards_and_a_grown_cache_is_compiled_again_not_misread(counted_compiles):
    model = tiny_model("llama", seed=4)
    cached = CachedModel(model, execution=Execution("static", compile=True))
    cached.warm_up(1)
    compiled_once = counted_compiles.frame_count
    ids = torch.arange(1, 12)
    cached.advance_to(ids[:8], last=1)  # the prompt: eager
    for end in range(9, 12):  # one-token steps: warm calls
        assert torch.allclose(cached.advance_to(ids[:end]), full_logits(model, ids[:end])[-1:], atol=1e-4)
    assert counted_compiles.frame_count == compiled_once and len(cached.execution.warm_calls) == 1
    static = cached._static  # noqa: SLF001 - grown by hand, as a sequence past its capacity grows it
    assert static is not None
    static.reserve(2 * static.capacity, kept=cached.length)  # another capacity: a graph not compiled yet
    longer = torch.arange(1, 13)
    assert torch.allclose(cached.advance_to(longer), full_logits(model, longer)[-1:], atol=1e-4)
    assert counted_compiles.frame_count == compiled_once + 1 and len(cached.execution.warm_calls) == 2
