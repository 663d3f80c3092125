"""The repetition controls in the decoding panel: ranges and tooltips, every rule, live from the next pass, and
remembered between launches."""

from __future__ import annotations

import dataclasses

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import PassEvent
from app.engine.loading import load_models
from app.engine.settings import DecodeSettings, LiveSettings, RepetitionSettings
from app.widgets.drafter_panel import DrafterPanel
from tests.widgets.fakes import FAKE_SUMMARY, FakeEngine
from tests.widgets.helpers import RUN_MS, wait_for_passes


def test_the_controls_offer_the_documented_ranges_and_say_what_they_do(qtbot):
    panel = DrafterPanel()
    qtbot.addWidget(panel)
    penalty, ngram = panel.repetition_penalty, panel.no_repeat_ngram
    assert (penalty.minimum(), penalty.maximum(), penalty.singleStep(), penalty.value()) == (1.0, 2.0, 0.05, 1.0)
    assert penalty.decimals() == 2 and penalty.text() == "1.00"
    assert (ngram.minimum(), ngram.maximum(), ngram.value()) == (0, 10, 0) and ngram.text() == "off"
    for spin in (penalty, ngram):
        tip = spin.toolTip()
        assert ". " not in tip and tip.endswith(".") and "every rule" in tip  # one sentence
    assert DecodeSettings().with_changes(**panel.changes()).repetition == RepetitionSettings()
    penalty.setValue(1.35)
    ngram.setValue(3)
    assert ngram.text() == "3"
    assert DecodeSettings().with_changes(**panel.changes()).repetition == RepetitionSettings(1.35, 3)
    for rule in ("greedy", "sample", "asd"):  # they apply under every rule, so they stay usable under each
        panel.set_rule(rule)
        assert panel.repetition_form.isEnabled(), rule


def test_apply_shows_the_settings_without_emitting(qtbot):
    panel = DrafterPanel()
    qtbot.addWidget(panel)
    with qtbot.assertNotEmitted(panel.sig_changed, wait=300):
        panel.apply(DecodeSettings(repetition=RepetitionSettings(1.2, 4)))
    assert panel.repetition_penalty.value() == 1.2 and panel.no_repeat_ngram.value() == 4


def test_repetition_controls_persist_between_launches(qtbot, make_window, store):
    first = make_window(FakeEngine())
    first.drafters.repetition_penalty.setValue(1.25)
    first.drafters.no_repeat_ngram.setValue(3)
    first.drafters.flush()
    assert first.live.get().repetition == RepetitionSettings(1.25, 3)
    first.close()

    second = make_window(FakeEngine())
    assert second.live.get().repetition == RepetitionSettings(1.25, 3)
    assert second.drafters.repetition_penalty.value() == 1.25 and second.drafters.no_repeat_ngram.value() == 3


def suggesting(penalty: float) -> FakeEngine:
    """A fake engine whose models suggest a repetition penalty (as the bundled family's playground.json does)."""
    engine = FakeEngine()
    engine.summary = dataclasses.replace(FAKE_SUMMARY, suggested_repetition=RepetitionSettings(penalty, 0))
    return engine


def test_the_controls_start_where_the_models_suggest_unless_settings_were_saved(qtbot, make_window, store):
    fresh = make_window(suggesting(1.2))  # nothing saved yet: a newcomer's first launch
    assert fresh.live.get().repetition == RepetitionSettings(1.2, 0)
    assert fresh.drafters.repetition_penalty.value() == 1.2
    assert "repetition penalty 1.2, as they suggest" in fresh.status.currentMessage()
    fresh.drafters.repetition_penalty.setValue(1.05)
    fresh.drafters.flush()
    fresh.close()

    again = make_window(suggesting(1.2))  # the user's saved choice wins over the suggestion
    assert again.live.get().repetition == RepetitionSettings(1.05, 0)
    assert "as they suggest" not in again.status.currentMessage()
    again.set_engine(FakeEngine())  # models loaded in the session bring theirs: these suggest none
    assert again.live.get().repetition == RepetitionSettings() and again.drafters.repetition_penalty.value() == 1.0
    again.set_engine(suggesting(1.3))
    assert again.live.get().repetition == RepetitionSettings(1.3, 0)


def test_a_change_mid_run_applies_from_the_next_pass(qtbot, real_window, tiny_llama):
    window = real_window
    window.drafters.set_drafters(("draft-model",))
    window.drafters.k_spin.setValue(3)
    window.controls.max_tokens.setValue(30)
    window.drafters.flush()
    assert window.start_generation(paused=True)
    window.step()
    wait_for_passes(qtbot, window, 1)

    window.drafters.repetition_penalty.setValue(1.3)
    window.drafters.no_repeat_ngram.setValue(3)
    with qtbot.waitSignal(window.drafters.sig_changed, timeout=2_000):
        pass
    assert window.live.get().repetition == RepetitionSettings(1.3, 3)
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        window.controls.pause_button.setChecked(False)  # resume to the end

    # The same run without the window: the controls switched on after the first pass.
    decoder = SpeculativeDecoder(load_models(*map(str, tiny_llama)))
    live = LiveSettings(window.live.get().with_changes(repetition=RepetitionSettings()))
    for event in decoder.generate(window.controls.prompt_text, live):
        if isinstance(event, PassEvent) and event.index == 0:
            live.update(repetition=dict(penalty=1.3, no_repeat_ngram=3))
        end = event
    assert window.session.end.token_ids == end.token_ids
    assert window.session.passes[0].committed_ids == end.token_ids[: len(window.session.passes[0].committed_ids)]
    unchanged = list(decoder.generate(window.controls.prompt_text, live.get().with_changes(
        repetition=RepetitionSettings())))[-1]
    assert unchanged.token_ids != end.token_ids  # the change did change the text
