"""The typed wire to an engine process (app/engine/protocol.py), the load request, and changes pushed as they happen."""

from __future__ import annotations

import inspect
import pickle

import pytest

from app.engine import protocol
from app.engine.engine import ModelsSummary
from app.engine.events import NoticeEvent
from app.engine.load_request import LoadRequest
from app.engine.loading import load_models
from app.engine.settings import ControlRequests, DecodeSettings, GenerationControl, LiveSettings, SettingsError

SUMMARY = ModelsSummary(target_name="t", draft_name=None, device="cpu", dtype="float32", available_drafters=("none",),
                        num_layers=2, default_exit_layer=1, context_length=64)


@pytest.mark.parametrize("message", [
    protocol.LoadModels(LoadRequest(target="org/model", device="cpu", compile=False)),
    protocol.StartRun("decode", "def f():", DecodeSettings(k=3), True, ControlRequests(paused=True, steps_granted=2)),
    protocol.LiveChange(DecodeSettings(k=6)),
    protocol.ControlChange(ControlRequests(stopped=True)),
    protocol.CloseEngine(),
    protocol.LoadProgress(0.5, "target"),
    protocol.ModelsLoaded(SUMMARY, ("a", "b")),
    protocol.LoadFailed(protocol.ErrorReport("ModelLoadError", "no such model")),
    protocol.RunStarted(),
    protocol.RunEvent(NoticeEvent("info", "hello")),
    protocol.RunDone(),
    protocol.RunRaised(protocol.ErrorReport.of(SettingsError("K must be >= 1"))),
])
def test_every_message_crosses_a_pipe_unchanged(message):
    assert pickle.loads(pickle.dumps(message)) == message


def test_an_error_report_names_the_class_and_never_says_nothing():
    assert protocol.ErrorReport.of(SettingsError("bad K")) == protocol.ErrorReport("SettingsError", "bad K")
    assert protocol.ErrorReport.of(RuntimeError()) == protocol.ErrorReport("RuntimeError", "RuntimeError")


def test_a_load_request_is_load_models_arguments():
    parameters = inspect.signature(load_models).parameters
    assert set(LoadRequest().to_dict()) <= set(parameters)
    for name, value in LoadRequest().to_dict().items():
        assert parameters[name].default == value, name
    request = LoadRequest(target="org/model", cache="static", compile=True)
    assert LoadRequest.from_dict(request.to_dict()) == request
    assert LoadRequest.of(request) is request
    assert LoadRequest.of({"target": "org/model"}) == LoadRequest(target="org/model")
    assert LoadRequest().bundled and not request.bundled
    assert request.with_changes(device="cpu") == LoadRequest(target="org/model", device="cpu", cache="static",
                                                             compile=True)


@pytest.mark.parametrize("data, says", [
    ({"target": "x", "colour": "red"}, "unexpected"),
    ([1, 2], "unexpected"),
    ({"target": 5}, "must be text"),
    ({"compile": "yes"}, "compile must be"),
])
def test_a_malformed_load_request_is_refused(data, says):
    with pytest.raises(ValueError, match=says):
        LoadRequest.from_dict(data)


def test_live_settings_tell_their_watchers_of_every_change_until_unwatched():
    live, told = LiveSettings(), []
    unwatch = live.watch(lambda: told.append(live.get().k))
    live.set(DecodeSettings(k=3))
    live.update(k=5)
    with pytest.raises(SettingsError):
        live.update(k=0)  # refused: nothing changed, nobody is told
    assert told == [3, 5]
    unwatch()
    live.update(k=7)
    assert told == [3, 5]


def test_a_control_tells_its_watchers_of_every_request():
    control, told = GenerationControl(), []
    control.watch(lambda: told.append(control.requests()))
    control.pause()
    control.step()
    control.set_min_pass_interval(0.5)
    control.resume()
    control.follow(ControlRequests(paused=True, steps_granted=3))
    control.stop()
    assert [(r.paused, r.steps_granted, r.min_pass_interval_s, r.stopped) for r in told] == [
        (True, 0, 0.0, False), (True, 1, 0.0, False), (True, 1, 0.5, False), (False, 1, 0.5, False),
        (True, 3, 0.0, False), (True, 3, 0.0, True)]
