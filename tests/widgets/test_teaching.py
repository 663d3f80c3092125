"""The teaching views: step mode, pass inspector, theory explorer, race, guide."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QUrl

from app.engine.events import PassEvent
from app.engine.race import PLAIN, SPECULATIVE
from app.engine.settings import MAX_K
from app.main_window import FIRST_START_GUIDE
from app.widgets.guide import READY_PROMPTS
from app.widgets.inspector import (
    COL_ACCEPT,
    COL_CAP,
    COL_P,
    COL_Q,
    COL_RATIO,
    COL_REGRET,
    COL_SUFFIX,
    COL_TARGET,
    COL_U,
    number_text,
)
from app.widgets.theory import MeasuredPoint, TheoryExplorer
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import RUN_MS, run_to_end, wait_for_passes


def use_setup(window, verify: str, chain=("draft-model",), k: int = 4, **groups) -> None:
    """Put a set-up into the live settings and the drafter panel, as the guide's prompts do."""
    settings = window.live.get().with_changes(drafters=chain, k=k, verify=verify, **groups)
    window.drafters.apply(settings)
    assert window.push_settings() is not None


def inspect_row(qtbot, window, row: int) -> PassEvent:
    """Click-equivalent: select pass `row` in the token view, wait for the inspector to show it."""
    window.token_view.select_pass(row)
    event = window.session.passes[row]
    qtbot.waitUntil(lambda: window.inspector.inspection is not None
                    and window.inspector.inspection.event is event, timeout=2_000)
    return event


# ---------------------------------------------------------------- step mode


def test_step_mode_runs_exactly_one_pass_per_step_and_inspects_it(qtbot, real_window):
    window = real_window
    window.controls.max_tokens.setValue(60)
    window.step_mode_action.setChecked(True)
    assert window.start_generation()  # step mode: the run waits before its first pass
    assert window.controls.pause_button.isChecked()

    for steps in range(1, 4):
        window.step_action.trigger()
        wait_for_passes(qtbot, window, steps)
        assert len(window.session.passes) == steps  # not one more
        qtbot.waitUntil(lambda steps=steps: window.inspector.inspection is not None
                        and window.inspector.inspection.event.index == steps - 1, timeout=2_000)

    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        window.stop_generation()
    assert window.session.end.reason == "stopped"
    assert window.session.end.passes == 3  # the decoder was waiting for a fourth Step


def test_run_continues_a_stepped_generation(qtbot, real_window):
    window = real_window
    window.controls.max_tokens.setValue(12)
    window.step_mode_action.setChecked(True)
    window.step()  # Step with no run starts one paused, then runs one pass
    wait_for_passes(qtbot, window, 1)
    with qtbot.waitSignal(window.sig_run_finished, timeout=RUN_MS):
        window.run_action.trigger()
    assert window.session.end.reason in ("max_tokens", "eos")
    assert len(window.session.passes) > 1


# ---------------------------------------------------------------- inspector


def assert_cell(inspector, row: int, col: int, value) -> None:
    assert inspector.value(row, col) == value
    if isinstance(value, float):
        assert inspector.table.item(row, col).text() == number_text(value)


def test_inspector_numbers_and_residual_under_sampling(qtbot, real_window):
    window = real_window
    use_setup(window, "sample", k=4, sampling={"temperature": 1.0, "top_k": 5})
    window.controls.max_tokens.setValue(30)
    run_to_end(qtbot, window)
    rows = [i for i, e in enumerate(window.session.passes) if e.detail is not None and e.detail.residual]
    assert rows, "some draft should be rejected on random tiny models"
    event = inspect_row(qtbot, window, rows[0])
    inspector = window.inspector

    for i, token in enumerate(event.drafted):
        for col, value in ((COL_P, token.p), (COL_Q, token.q), (COL_ACCEPT, token.accept_prob), (COL_U, token.u),
                           (COL_TARGET, token.target_id)):
            assert_cell(inspector, i, col, value)
        assert inspector.value(i, COL_RATIO) == pytest.approx(token.p / token.q)
    assert not inspector.table.isColumnHidden(COL_U) and inspector.table.isColumnHidden(COL_REGRET)

    shown = inspector.residual_shown()
    entries = event.detail.residual
    assert shown["residual"] == [e.r for e in entries] + [event.detail.residual_other]
    assert sum(shown["residual"]) == pytest.approx(1.0, abs=1e-6)
    for p, q, r in zip(shown["p"], shown["q"], shown["residual"], strict=False):
        if q >= p:
            assert r == 0.0
    assert any(r > 0 for r in shown["residual"])
    assert event.appended.text.replace("\n", "↵")[:3] in inspector.residual_title.text() or event.appended.text == ""
    assert "residual" in inspector.paragraph.text()


def test_inspector_under_greedy_shows_the_targets_argmax(qtbot, real_window):
    window = real_window
    use_setup(window, "greedy")
    window.controls.max_tokens.setValue(20)
    run_to_end(qtbot, window)
    row = next(i for i, e in enumerate(window.session.passes) if any(t.outcome == "rejected" for t in e.drafted))
    event = inspect_row(qtbot, window, row)
    inspector = window.inspector
    for i, token in enumerate(event.drafted):
        assert_cell(inspector, i, COL_P, token.p)
        assert_cell(inspector, i, COL_TARGET, token.target_id)
    assert inspector.table.isColumnHidden(COL_U)
    assert not inspector.residual.isVisible()
    assert "argmax" in inspector.paragraph.text()
    # The bars show the selected row's top of p and q, the drafted token among them.
    assert inspector.bars.heights("p") and inspector.bars.heights("q")


def test_inspector_under_asd_shows_regret_suffix_and_ledger(qtbot, real_window):
    window = real_window
    use_setup(window, "asd", asd={"budget": 50.0, "gate": 5.0, "cap": 4})
    window.controls.max_tokens.setValue(24)
    run_to_end(qtbot, window)
    passes = window.session.passes
    row = next(i for i, e in enumerate(passes) if any(t.outcome == "asd_exception" for t in e.drafted))
    event = inspect_row(qtbot, window, row)
    inspector = window.inspector
    k = len(event.drafted)
    for i, token in enumerate(event.drafted):
        assert_cell(inspector, i, COL_REGRET, token.regret)
        assert inspector.value(i, COL_SUFFIX) == k - i
    assert inspector.value(0, COL_CAP) == int(event.drafted[0].id != event.drafted[0].target_id)
    before = event.ledger.budget - event.detail.asd_remaining
    spent = f"ASD ledger: {number_text(before)} → {number_text(event.ledger.spent)}"
    assert inspector.ledger.text().startswith(spent)
    assert "B = 50" in inspector.ledger.text()
    assert "ASD accepted" in inspector.paragraph.text()


def test_clicked_pass_is_inspected_with_the_fake_engine(qtbot, fake_window):
    window = fake_window
    window.controls.prompt.setPlainText("hello")
    window.controls.max_tokens.setValue(30)
    run_to_end(qtbot, window)
    event = inspect_row(qtbot, window, 2)
    assert window.inspector.header.text().startswith(f"Pass {event.index}")
    assert window.inspector.table.rowCount() == len(event.drafted) + 1  # + the appended token


# ---------------------------------------------------------------- theory


def brute_force_best_k(alpha: float, c: float) -> int:
    """argmax over K = 1..MAX_K of (1 - a^(K+1)) / ((1 - a)(K c + 1)), the smallest K on ties."""
    def speedup(k: int) -> float:
        tokens = k + 1 if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
        return tokens / (k * c + 1)

    best = 1
    for k in range(2, MAX_K + 1):
        if speedup(k) > speedup(best):
            best = k
    return best


@pytest.mark.parametrize("c", [0.0, 0.01, 0.05, 0.1, 0.3, 1.0])
def test_theory_optimal_k_agrees_with_brute_force(qtbot, c):
    theory = TheoryExplorer()
    qtbot.addWidget(theory)
    for alpha in (0.0, 0.2, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0):
        theory.set_measured(MeasuredPoint(alpha=alpha, c=c, tokens_per_pass=1.5, speedup=1.2, k=4))
        assert theory.optimal_k == brute_force_best_k(alpha, c), (alpha, c)
        assert f"and c = {c:.3g}: {theory.optimal_k} " in theory.summary.text()


def test_theory_follows_the_run_and_keeps_hand_picked_values(qtbot, fake_window):
    window = fake_window
    window.controls.prompt.setPlainText("hello")
    window.controls.max_tokens.setValue(40)
    window.theory_dock.show()
    window.theory_dock.raise_()
    run_to_end(qtbot, window)
    theory = window.theory
    qtbot.waitUntil(lambda: theory.measured.alpha is not None, timeout=2_000)
    last = window.session.passes[-1]
    assert theory.measured.alpha == window.session.alpha
    assert (theory.k, theory.c) == (window.session.start.settings["k"], pytest.approx(last.stats.c))
    assert theory.optimal_k == brute_force_best_k(window.session.alpha, last.stats.c)
    rates = theory.position_rates()
    assert 1 <= len(rates) <= last.k and all(r is None or 0 <= r <= 1 for r in rates)

    theory.k_spin.setValue(9)  # a hand-picked K is kept, no longer following the run
    assert not theory.follow_run.isChecked()
    theory.refresh()
    assert theory.k == 9
    assert "K = 9" in theory.summary.text()


# ---------------------------------------------------------------- race


def run_race(qtbot, window) -> None:
    with qtbot.waitSignal(window.sig_race_finished, timeout=RUN_MS):
        assert window.start_race()
    qtbot.waitUntil(lambda: not window.race_view.replaying, timeout=RUN_MS)


def test_race_under_greedy_replays_identical_texts(qtbot, real_window):
    window = real_window
    use_setup(window, "greedy", chain=("prompt-lookup", "draft-model"))
    window.controls.max_tokens.setValue(16)
    run_race(qtbot, window)
    view = window.race_view
    result = view.timeline.result
    assert result is not None and result.identical and result.must_match
    assert view.lane_text(PLAIN) == view.lane_text(SPECULATIVE) != ""
    assert view.lane_text(PLAIN).startswith(window.controls.prompt_text)
    assert f"{len(result.plain.token_ids)} tokens" in view.lanes[PLAIN].clock.text()
    assert "identical" in view.verdict.text()
    assert f"{result.plain.passes} passes" in view.lanes[PLAIN].clock.text()
    assert not window.is_busy and window.controls.generate_button.isEnabled()

    view.replay()  # the finished race plays again, to the same end
    assert view.replaying
    qtbot.waitUntil(lambda: not view.replaying, timeout=RUN_MS)
    assert view.lane_text(PLAIN) == view.lane_text(SPECULATIVE)


def test_race_under_asd_shows_where_the_texts_diverge(qtbot, real_window):
    window = real_window
    use_setup(window, "asd", asd={"budget": 50.0, "gate": 5.0, "cap": 4})
    window.controls.prompt.setPlainText("The quick brown fox jumps over the lazy dog. The quick")
    window.controls.max_tokens.setValue(20)
    run_race(qtbot, window)
    result = window.race_view.timeline.result
    assert not result.identical
    assert f"first differ at generated token {result.first_divergence + 1}" in window.race_view.verdict.text()
    asd = result.speculative.asd  # what ASD spent and bought, in the race's words
    words = window.race_view.verdict.text()
    assert f"ASD spent regret {asd.spent:.3g} of B = 50 on {asd.exceptions} exception" in words


def test_generation_waits_while_a_race_runs(qtbot, real_window):
    window = real_window
    window.controls.max_tokens.setValue(8)
    with qtbot.waitSignal(window.sig_race_finished, timeout=RUN_MS):
        assert window.start_race()
        assert not window.start_generation()
        assert "race" in window.banner.text()
    qtbot.waitUntil(lambda: not window.race_view.replaying, timeout=RUN_MS)


# ---------------------------------------------------------------- guide


def test_guide_is_offered_on_first_launch_and_sets_up_ready_prompts(qtbot, make_window, store):
    window = make_window(FakeEngine())
    assert window.drafters_dock.isVisible() and not window.guide_dock.isHidden()  # its tab, beside the drafters
    assert window.guide_dock in window.tabifiedDockWidgets(window.drafters_dock)
    assert window.guide_dock.windowTitle() == FIRST_START_GUIDE  # its tab invites
    window.guide_action.trigger()  # F1
    assert window.guide_dock.isVisible() and window.guide_dock.windowTitle() == "Guide"
    html = window.guide.browser.toHtml()
    for words in ("accepted draft", "E(α, K)", "min(1, p(x) / q(x))", "Ready prompts"):
        assert words in html
    window.guide.follow(QUrl("use:0"))
    ready = READY_PROMPTS[0]
    assert window.controls.prompt_text == ready.prompt
    live = window.live.get()
    assert (live.drafters, live.k, live.verify) == (ready.drafters, ready.k, ready.verify)
    window.guide_dock.hide()
    window.close()  # saves the layout, and that the guide has been seen

    again = make_window()
    assert not again.guide_dock.isVisible()  # not forced open a second time
