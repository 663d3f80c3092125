"""Faults during a run: a drafter that breaks, out of memory, Stop during a slow pass. Nothing is lost."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest
import torch

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.model_drafter import ModelDrafter
from app.engine.errors import OutOfMemoryError
from app.engine.events import EndEvent, NoticeEvent, PassEvent, to_json_line
from app.engine.loading import load_models
from app.engine.settings import DecodeSettings, GenerationControl
from tests.engine.helpers import PROMPTS, fail_on_call, run


@pytest.fixture(scope="module")
def decoder(tiny_llama):
    target, draft = tiny_llama
    return SpeculativeDecoder(load_models(str(target), str(draft)))


def test_drafter_exception_mid_run_falls_back_and_stays_lossless(decoder, monkeypatch):
    _, plain = run(decoder, PROMPTS[0], drafters=(), max_new_tokens=30)
    monkeypatch.setattr(ModelDrafter, "propose", fail_on_call(3, RuntimeError("weights on fire"))(ModelDrafter.propose))
    events = list(decoder.generate(PROMPTS[0], DecodeSettings(drafters=("draft-model", "prompt-lookup"),
                                                              max_new_tokens=30)))
    notices = [e for e in events if isinstance(e, NoticeEvent)]
    assert len(notices) == 1 and "draft-model" in notices[0].message and "weights on fire" in notices[0].message
    drafters = [e.drafter for e in events if isinstance(e, PassEvent)]
    assert drafters[:2] == ["draft-model", "draft-model"] and "draft-model" not in drafters[2:]
    assert events[-1].reason == "max_tokens" and events[-1].token_ids == plain.token_ids


def test_out_of_memory_in_a_drafter_is_reported_and_the_run_goes_on(decoder, monkeypatch):
    monkeypatch.setattr(ModelDrafter, "propose",
                        fail_on_call(2, torch.OutOfMemoryError("CUDA out of memory"))(ModelDrafter.propose))
    events = list(decoder.generate(PROMPTS[1], DecodeSettings(drafters=("draft-model",), max_new_tokens=12)))
    notice = next(e for e in events if isinstance(e, NoticeEvent))
    assert "out of memory" in notice.message and "released" in notice.message
    assert events[-1].reason == "max_tokens"


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
                                   RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB"),
                                   MemoryError()])
def test_out_of_memory_during_loading(tiny_llama, monkeypatch, error):
    import app.engine.loading.hub as hub

    def exhausted(*args, **kwargs):
        raise error

    monkeypatch.setattr(hub.AutoModelForCausalLM, "from_pretrained", exhausted)
    with pytest.raises(OutOfMemoryError, match="memory was released.*smaller"):
        load_models(str(tiny_llama[0]))


def test_out_of_memory_during_a_pass_keeps_the_text_and_the_next_run_works(decoder, monkeypatch):
    _, plain = run(decoder, PROMPTS[2], drafters=("draft-model",), max_new_tokens=40)
    target = decoder.target
    # the run above timed the one-token forwards for these models: after the prefill, only passes call the target
    monkeypatch.setattr(target, "extend", fail_on_call(5, torch.OutOfMemoryError("CUDA out of memory"))(target.extend))
    events = list(decoder.generate(PROMPTS[2], DecodeSettings(drafters=("draft-model",), max_new_tokens=40)))
    end = events[-1]
    assert end.reason == "error" and end.error_type == "OutOfMemoryError"
    assert "memory was released" in end.error and "Lower K" in end.error
    passes = [e for e in events if isinstance(e, PassEvent)]
    assert passes and end.passes == len(passes)
    kept = list(end.token_ids)
    assert kept and kept == list(plain.token_ids[: len(kept)])  # the text so far, exactly
    assert target.length == 0  # every cache was dropped
    _, again = run(decoder, PROMPTS[2], drafters=("draft-model",), max_new_tokens=40)
    assert again.token_ids == plain.token_ids


def test_stop_during_a_slow_pass_ends_at_the_next_boundary(decoder, monkeypatch):
    pass_s = 0.4

    def slow(method):
        def wrapped(*args, **kwargs):
            time.sleep(pass_s)
            return method(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(ModelDrafter, "propose", slow(ModelDrafter.propose))
    control = GenerationControl()
    events: list = []
    worker = threading.Thread(target=lambda: events.extend(
        decoder.generate(PROMPTS[0], DecodeSettings(drafters=("draft-model",), max_new_tokens=500), control)))
    worker.start()
    deadline = time.monotonic() + 60
    while sum(isinstance(e, PassEvent) for e in events) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(pass_s / 2)  # now inside a pass
    asked = time.monotonic()
    control.stop()
    worker.join(timeout=60)
    waited = time.monotonic() - asked
    end = events[-1]
    assert isinstance(end, EndEvent) and end.reason == "stopped"
    passes = [e for e in events if isinstance(e, PassEvent)]
    assert end.passes == len(passes) >= 2  # the pass under way was finished, then nothing more
    assert list(end.token_ids) == [t for p in passes for t in p.committed_ids]
    assert waited < 2 * pass_s + 1.0, f"stop took {waited:.2f} s"


def test_json_lines_stay_strict_json_when_a_model_produces_nan():
    from app.engine.events import RunningStats

    end = EndEvent("error", (1, 2), "hi", 1, 0.0, RunningStats(math.nan, 1.0, math.inf, -math.inf), "boom", "X")
    line = to_json_line(end)
    data = json.loads(line, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
    assert data["stats"] == {"alpha": None, "tokens_per_pass": 1.0, "c": None, "tokens_per_s": None,
                             "acceptance_rate": None, "expected_tokens_per_pass": None, "verify_cost": None,
                             "estimated_speedup": None, "target_forward_ms": None}
