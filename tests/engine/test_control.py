"""GenerationControl's slow motion: a minimum interval between the starts of two passes, thread-safe."""

from __future__ import annotations

import threading
import time

import pytest

from app.engine.settings import ControlRequests, GenerationControl, SettingsError

INTERVAL_S = 0.05


def test_turns_are_spaced_by_the_minimum_interval():
    control = GenerationControl()
    control.set_min_pass_interval(INTERVAL_S)
    turns = []
    for _ in range(5):
        assert control.wait_for_turn()
        turns.append(time.monotonic())
    gaps = [b - a for a, b in zip(turns, turns[1:], strict=False)]
    assert min(gaps) >= INTERVAL_S * 0.95


def test_full_speed_again_and_stop_end_the_wait_early():
    control = GenerationControl()
    control.set_min_pass_interval(60.0)
    assert control.wait_for_turn()  # the first turn never waits
    threading.Timer(0.05, control.set_min_pass_interval, (0.0,)).start()
    started = time.monotonic()
    assert control.wait_for_turn()
    assert time.monotonic() - started < 5
    control.set_min_pass_interval(60.0)
    threading.Timer(0.05, control.stop).start()
    assert not control.wait_for_turn()


def test_the_interval_crosses_as_plain_data_and_is_validated():
    control = GenerationControl()
    control.set_min_pass_interval(0.25)
    mirror = GenerationControl()
    mirror.follow(control.requests())
    assert mirror.min_pass_interval == 0.25
    assert control.requests() == ControlRequests(min_pass_interval_s=0.25)
    with pytest.raises(SettingsError, match="interval"):
        control.set_min_pass_interval(-1)
