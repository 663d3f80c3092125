"""The window's figures are the engine's: α of the session equals the end event's, EOS inside a block included."""

from __future__ import annotations

import pytest

from app.engine.core.stats import expected_tokens_per_pass
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import CLIPPED, EndEvent, PassEvent
from app.engine.loading import load_models
from app.engine.settings import DecodeSettings, LiveSettings
from app.session import Session
from app.widgets.status import RunStatusBar

PROMPT = "def fibonacci(n):"


@pytest.fixture(scope="module")
def demo_decoder():
    return SpeculativeDecoder(load_models())  # the bundled pair (HF_HUB_OFFLINE=1 in conftest)


def session_of(qtbot, events) -> Session:
    session = Session()
    session.begin()
    for event in events:
        session.on_event(event)
    return session


def eos_inside_a_block(events) -> int | None:
    """A token id that, taken as EOS, ends the run inside a block (accepted drafts follow its first use)."""
    seen: set[int] = set()
    for event in (e for e in events if isinstance(e, PassEvent)):
        kept = [t.id for t in event.drafted if t.outcome == "accepted"]
        for token in kept[:-1]:
            if token not in seen:
                return token
        seen.update(event.committed_ids)
    return None


def test_window_alpha_is_the_engines_also_when_eos_ends_a_block(qtbot, demo_decoder, monkeypatch):
    settings = DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=64)
    events = list(demo_decoder.generate(PROMPT, settings))
    session = session_of(qtbot, events)
    end = events[-1]
    assert isinstance(end, EndEvent) and end.stats.alpha is not None
    assert session.alpha == end.stats.alpha and session.acceptance_rate == end.stats.acceptance_rate

    eos = eos_inside_a_block(events)
    assert eos is not None
    monkeypatch.setattr(demo_decoder, "_eos", {eos})
    events = list(demo_decoder.generate(PROMPT, settings))
    end, last = events[-1], events[-2]
    assert end.reason == "eos" and any(t.outcome == CLIPPED for t in last.drafted)
    session = session_of(qtbot, events)
    assert session.alpha == end.stats.alpha  # the clipped drafts count as neither (docs/ALGORITHMS.md §7.3)
    bar = RunStatusBar()
    bar.show_run(session.tokens_per_s, session.alpha, len(session.passes), session.token_count,
                 session.acceptance_rate)
    assert bar.alpha_label.text().startswith(f"α {end.stats.alpha:.2f}")


def test_k_changed_mid_run_keeps_one_set_of_figures(qtbot, demo_decoder):
    live = LiveSettings(DecodeSettings(drafters=("draft-model",), k=2, max_new_tokens=80))
    events = []
    for event in demo_decoder.generate(PROMPT, live):
        events.append(event)
        if isinstance(event, PassEvent) and event.index == 8:
            live.set(live.get().with_changes(k=6))
    passes = [e for e in events if isinstance(e, PassEvent)]
    end = events[-1]
    assert {p.k_setting for p in passes} == {2, 6}
    accepted = sum(p.n_accepted for p in passes)
    rejections = sum(any(t.outcome == "rejected" for t in p.drafted)
                     and not any(t.outcome == CLIPPED for t in p.drafted) for p in passes)
    assert end.stats.alpha == pytest.approx(accepted / (accepted + rejections))
    mean_e = sum(expected_tokens_per_pass(end.stats.alpha, len(p.drafted)) for p in passes) / len(passes)
    assert end.stats.expected_tokens_per_pass == pytest.approx(mean_e)
    session = session_of(qtbot, events)
    assert session.alpha == end.stats.alpha
    assert session.k_setting == 6  # the K the run is set to now, not the last pass's clipped K
