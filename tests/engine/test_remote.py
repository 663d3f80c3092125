"""The engine in its own process behaves like the engine in this one: same events, live settings,
control, typed errors; and a child that dies, hangs up or is abandoned never takes the caller with it."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import time

import pytest

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.engine import LocalEngine
from app.engine.errors import ContextTooLongError, ModelLoadError
from app.engine.events import EndEvent, PassEvent, StartEvent
from app.engine.loading import load_models
from app.engine.race import RaceResult
from app.engine.remote import EngineProcess, EngineProcessError, EngineProcessStarter, ModelsSummary
from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings, SettingsError
from tests.engine.helpers import PROMPTS


def request_for(pair) -> dict:
    target, draft = pair
    return dict(target=str(target), draft=str(draft), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def local(tiny_llama):
    models = load_models(**request_for(tiny_llama))
    return models, SpeculativeDecoder(models)


@pytest.fixture(scope="module")
def engine(tiny_llama):
    progress = []
    engine = EngineProcess(request_for(tiny_llama), progress=lambda fraction, message: progress.append(fraction),
                           threads=1)
    assert progress and progress[-1] == 1.0
    yield engine
    engine.close()
    assert not engine.alive


def pass_events(events) -> list[PassEvent]:
    return [event for event in events if isinstance(event, PassEvent)]


def untimed(passes: list[PassEvent]) -> list[PassEvent]:
    """The passes without what depends on the clock (timings, and the speeds in the running stats)."""
    return [dataclasses.replace(p, timing=None, stats=None) for p in passes]


@pytest.mark.parametrize("settings", [
    DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=40),
    DecodeSettings(drafters=("prompt-lookup", "layer-skip"), k=3, max_new_tokens=40),
    DecodeSettings(drafters=("draft-model",), k=2, verify="sample", seed=5, max_new_tokens=30),
])
def test_same_events_as_in_process(engine, local, settings):
    models, decoder = local
    here = list(decoder.generate(PROMPTS[0], settings))
    there = list(engine.generate(PROMPTS[0], settings))
    assert isinstance(there[0], StartEvent) and isinstance(there[-1], EndEvent)
    assert there[-1].token_ids == here[-1].token_ids and there[-1].text == here[-1].text
    assert untimed(pass_events(there)) == untimed(pass_events(here))  # drafts, p, q, outcomes, details
    assert engine.summary == ModelsSummary.of(models)


def test_tokens_are_spelled_without_a_tokenizer_here(engine, local):
    models, _ = local
    tokenizer = models.tokenizer
    for token_id in (0, 5, 100, len(tokenizer) - 1):
        assert engine.token_text(token_id) == tokenizer.decode([token_id])
    assert engine.token_text(len(tokenizer)) == "" and engine.token_text(-1) == ""


def test_live_settings_and_steps_reach_the_child_between_passes(engine):
    live = LiveSettings(DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=200))
    control = GenerationControl()
    control.pause()
    stream = engine.generate(PROMPTS[1], live, control)
    assert isinstance(next(stream), StartEvent)
    control.step()
    first = next(stream)
    assert isinstance(first, PassEvent) and first.k == 4 and first.drafter == "draft-model"
    live.update(k=2, drafters=("prompt-lookup",))
    control.step()
    second = next(stream)
    assert isinstance(second, PassEvent) and second.k == 2 and second.drafter in ("prompt-lookup", None)
    control.stop()
    end = next(stream)
    assert isinstance(end, EndEvent) and end.reason == "stopped" and end.passes == 2
    assert next(stream, None) is None


def test_a_paused_run_waits_for_its_step(engine):
    control = GenerationControl()
    control.pause()
    stream = engine.generate(PROMPTS[2], DecodeSettings(max_new_tokens=20), control)
    assert isinstance(next(stream), StartEvent)
    link_waited = time.monotonic()
    control.step()
    assert isinstance(next(stream), PassEvent)
    assert time.monotonic() - link_waited < 10
    control.resume()
    events = list(stream)
    assert isinstance(events[-1], EndEvent) and events[-1].reason in ("max_tokens", "eos")


def test_slow_motion_reaches_the_child(engine):
    control = GenerationControl()
    control.set_min_pass_interval(0.2)
    stream = engine.generate(PROMPTS[2], DecodeSettings(max_new_tokens=200), control)
    assert isinstance(next(stream), StartEvent)
    arrived = []
    for event in stream:
        if isinstance(event, PassEvent):
            arrived.append(time.monotonic())
        if len(arrived) == 4:
            control.stop()
    assert len(arrived) >= 4
    assert arrived[3] - arrived[0] >= 3 * 0.2 * 0.9  # three intervals between four passes


def test_typed_errors_arrive_before_the_run(engine, local):
    models, _ = local
    with pytest.raises(SettingsError, match="prompt is empty"):
        engine.generate("   ", DecodeSettings())
    with pytest.raises(ContextTooLongError):
        engine.generate("hello " * (models.context_length + 10), DecodeSettings())
    end = list(engine.generate(PROMPTS[0], DecodeSettings(max_new_tokens=5)))[-1]
    assert end.reason == "max_tokens"  # the engine is still usable


def test_an_abandoned_run_is_stopped_and_the_next_one_starts_clean(engine):
    stream = engine.generate(PROMPTS[0], DecodeSettings(drafters=("draft-model",), max_new_tokens=300))
    assert isinstance(next(stream), StartEvent)
    assert isinstance(next(stream), PassEvent)
    stream.close()  # the caller stops reading mid-run
    events = list(engine.generate(PROMPTS[1], DecodeSettings(max_new_tokens=6)))
    assert isinstance(events[0], StartEvent) and events[0].prompt_text == PROMPTS[1]
    assert isinstance(events[-1], EndEvent) and len(events[-1].token_ids) == 6


def test_one_run_at_a_time(engine):
    stream = engine.generate(PROMPTS[0], DecodeSettings(max_new_tokens=300))
    with pytest.raises(EngineProcessError, match="already running"):
        engine.generate(PROMPTS[1], DecodeSettings())
    stream.close()


def test_race_runs_in_the_child(engine):
    settings = DecodeSettings(drafters=("draft-model",), k=3, max_new_tokens=16)
    result = list(engine.race(PROMPTS[0], settings))[-1]
    assert isinstance(result, RaceResult) and result.identical


def test_the_local_engine_keeps_the_same_contract(engine, local):
    models, decoder = local
    here = LocalEngine(models, decoder)
    assert here.summary == engine.summary and here.alive
    for token_id in (0, 5, 100):
        assert here.token_text(token_id) == engine.token_text(token_id)
    settings = DecodeSettings(drafters=("draft-model",), k=3, max_new_tokens=16)
    assert list(here.race(PROMPTS[0], settings))[-1].plain.token_ids == \
        list(engine.race(PROMPTS[0], settings))[-1].plain.token_ids
    with pytest.raises(SettingsError, match="prompt is empty"):
        here.generate("   ", DecodeSettings())


def test_load_failure_is_the_loaders_typed_error_and_leaves_no_process(tmp_path):
    with pytest.raises(ModelLoadError, match="not a loadable model folder|does not exist|not found"):
        EngineProcess(dict(target=str(tmp_path / "missing"), draft=None, device="cpu", dtype="float32"), threads=1)


def test_cancelled_load_ends_the_child_at_once(tiny_llama):
    started = time.monotonic()
    with pytest.raises(EngineProcessError, match="cancelled"):
        EngineProcess(request_for(tiny_llama), cancelled=lambda: time.monotonic() - started > 0.2, threads=1)
    assert time.monotonic() - started < 5


def test_a_process_started_ahead_loads_what_it_is_asked_later(tiny_llama):
    before = set(multiprocessing.active_children())
    engines = EngineProcessStarter(threads=1, ahead=True)  # what the app does first, before Qt and the window
    (ahead,) = set(multiprocessing.active_children()) - before
    first = engines(request_for(tiny_llama))  # the window's first load: the process started ahead takes it
    second = None
    try:
        assert first.pid == ahead.pid and first.summary.draft_name == str(tiny_llama[1])
        assert list(first.generate(PROMPTS[0], DecodeSettings(max_new_tokens=4)))[-1].reason == "max_tokens"
        second = engines(request_for(tiny_llama))  # a later load: a process of its own
        assert second.pid != first.pid and second.alive
    finally:
        engines.close()
        first.close()
        if second is not None:
            second.close()
    assert not first.alive and not ahead.is_alive()


def test_a_process_started_ahead_and_never_asked_ends_with_its_starter():
    before = set(multiprocessing.active_children())
    engines = EngineProcessStarter(threads=1, ahead=True)
    (ahead,) = set(multiprocessing.active_children()) - before
    started = time.monotonic()
    engines.close()
    assert not ahead.is_alive() and time.monotonic() - started < 5
    engines.close()  # safe twice


@pytest.mark.parametrize(("cores", "ahead"), [(1, False), (2, False), (3, True), (16, True)])
def test_a_process_starts_ahead_only_with_a_core_of_its_own(monkeypatch, cores, ahead):
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    before = set(multiprocessing.active_children())
    engines = EngineProcessStarter(threads=1)
    try:
        assert len(set(multiprocessing.active_children()) - before) == (1 if ahead else 0)
    finally:
        engines.close()


def test_a_child_that_dies_mid_run_is_a_typed_error(tiny_llama):
    engine = EngineProcess(request_for(tiny_llama), threads=1)
    try:
        stream = engine.generate(PROMPTS[0], DecodeSettings(max_new_tokens=400))
        assert isinstance(next(stream), StartEvent)
        os.kill(engine.pid, signal.SIGKILL)  # what an out-of-memory killer or a crash in native code does
        with pytest.raises(EngineProcessError, match="stopped unexpectedly.*Load the models again"):
            for _ in stream:
                pass
        assert not engine.alive
        with pytest.raises(EngineProcessError):
            engine.generate(PROMPTS[0], DecodeSettings(max_new_tokens=4))
    finally:
        engine.close()
