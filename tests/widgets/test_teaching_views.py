"""The inspector, theory explorer and race teach without contradictions (on real tiny models)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.engine.core.fidelity import changed_positions
from app.engine.core.stats import expected_tokens_per_pass, optimal_k
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import RESAMPLED, PassEvent
from app.engine.loading import load_models
from app.engine.race import LANES, PLAIN, SPECULATIVE, Race, RaceResult
from app.engine.settings import AsdSettings, DecodeSettings, SamplingSettings
from app.session import Session
from app.teaching.explain import residual_bars
from app.widgets.inspector import COL_ACCEPT, COL_P, COL_RATIO, COL_U, PassInspector, token_label
from app.widgets.race import RaceView
from app.widgets.theory import ALPHAS, FAMILY, MeasuredPoint, TheoryExplorer

PROMPT = "def add(a, b):"
SAMPLING = SamplingSettings(temperature=1.0, top_k=5)


@pytest.fixture(scope="module")
def models(tiny_llama):
    target, draft = tiny_llama
    return load_models(str(target), str(draft), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def decoder(models):
    return SpeculativeDecoder(models)


def inspector_on(qtbot, decoder, **settings) -> tuple[PassInspector, Session]:
    """An inspector bound to a session that holds one finished run of these settings."""
    session = Session()
    session.begin()
    for event in decoder.generate(PROMPT, DecodeSettings(drafters=("draft-model",), k=4, **settings)):
        session.on_event(event)
    inspector = PassInspector()
    qtbot.addWidget(inspector)
    inspector.set_session(session)
    inspector.resize(1400, 500)
    inspector.show()
    return inspector, session


def sampled_rejections(session: Session) -> list[PassEvent]:
    return [e for e in session.passes if e.detail is not None and e.detail.residual and e.appended is not None
            and e.appended.kind == RESAMPLED]


# ---------------------------------------------------------------- inspector


def test_sampled_replacement_always_has_its_own_residual_bar(qtbot, decoder):
    inspector, session = inspector_on(qtbot, decoder, verify="sample", sampling=SAMPLING, max_new_tokens=40)
    events = sampled_rejections(session)
    assert len(events) >= 3
    for event in events:  # the token drawn from r may lie outside every stored top; the engine records it anyway
        sampled = event.appended.id
        (entry,) = (e for e in event.detail.residual if e.id == sampled)
        inspector.show_event(event)
        labels = inspector.residual.labels()
        label = token_label(f"#{sampled}", sampled)  # no tokenizer bound: ids spelled as #id
        assert labels.count(label) == 1 and labels[-1] == "others"
        heights = inspector.residual_shown()["residual"]
        assert heights[labels.index(label)] == pytest.approx(entry.r)
        assert sum(heights) == pytest.approx(1.0, abs=1e-6)
        assert residual_bars(event).other == pytest.approx(event.detail.residual_other)
        assert "sampled token (outlined)" in inspector.residual_title.text()


def test_sampling_shows_p_over_q_and_the_strip_greedy_hides_them(qtbot, decoder):
    inspector, session = inspector_on(qtbot, decoder, verify="sample", sampling=SAMPLING, max_new_tokens=40)
    event = sampled_rejections(session)[0]
    inspector.show_event(event)
    n = inspector.inspection.first_rejection
    for col in (COL_RATIO, COL_ACCEPT, COL_U):
        assert not inspector.table.isColumnHidden(col)
    token = event.drafted[n]
    assert inspector.strip.isVisible()
    assert (inspector.strip.accept, inspector.strip.u) == (token.accept_prob, token.u)
    assert token.u > token.accept_prob  # the dot lies right of the mark: rejected
    inspector.table.selectRow(len(event.drafted))  # the appended token was not tested by u
    assert not inspector.strip.isVisible()

    greedy, greedy_session = inspector_on(qtbot, decoder, verify="greedy", max_new_tokens=30)
    row = next(e for e in greedy_session.passes if any(t.outcome == "rejected" for t in e.drafted))
    greedy.show_event(row)
    for col in (COL_RATIO, COL_ACCEPT, COL_U):
        assert greedy.table.isColumnHidden(col)  # p/q = 1.6 on a rejected greedy row would contradict the rule
    assert not greedy.table.isColumnHidden(COL_P)
    assert not greedy.strip.isVisible()
    for t in range(greedy.table.rowCount()):
        greedy.table.selectRow(t)
        assert not greedy.strip.isVisible()


def test_previous_and_next_buttons_walk_the_passes(qtbot, decoder):
    inspector, session = inspector_on(qtbot, decoder, verify="greedy", max_new_tokens=20)
    last = session.passes[-1].index
    assert last >= 2
    inspector.show_pass(1)
    qtbot.mouseClick(inspector.next_button, Qt.MouseButton.LeftButton)
    assert inspector.inspection.event.index == 2
    qtbot.mouseClick(inspector.previous_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(inspector.previous_button, Qt.MouseButton.LeftButton)
    assert inspector.inspection.event.index == 0
    assert not inspector.previous_button.isEnabled() and inspector.next_button.isEnabled()
    inspector.show_pass(last)
    assert inspector.previous_button.isEnabled() and not inspector.next_button.isEnabled()
    assert inspector.header.text().startswith(f"Pass {last}")


# ---------------------------------------------------------------- theory


def test_theory_draws_the_e_family_the_optimal_k_curve_and_follows_its_sliders(qtbot):
    theory = TheoryExplorer()
    qtbot.addWidget(theory)
    assert tuple(theory.family) == FAMILY == tuple(range(1, 9))
    for k, curve in theory.family.items():
        x, y = curve.getData()
        assert list(x) == list(ALPHAS)
        assert y[-1] == pytest.approx(k + 1) and y[100] == pytest.approx(expected_tokens_per_pass(0.5, k))

    theory.set_measured(MeasuredPoint(alpha=0.8, c=0.1, tokens_per_pass=3.3, speedup=2.0, k=4))
    assert theory.alpha == pytest.approx(0.8)  # following the run: the α cursor sits at the run's α̂
    x, y = theory.e_point.getData()
    assert (x[0], y[0]) == (0.8, 3.3)
    _x, best = theory.optimal_line.getData()
    assert best[160] == optimal_k(0.8, 0.1, k_max=64)
    assert "optimal K" in [label.text for _item, label in theory.optimal_plot.legend.items]

    theory.alpha_slider.setValue(50)  # by hand: stop following, move the cursor
    assert not theory.follow_run.isChecked()
    assert all(cursor.value() == pytest.approx(0.5) for cursor in theory.cursors)
    assert "Slider: at α = 0.50" in theory.summary.text()
    theory.c_slider.setValue(50)
    assert theory.c == pytest.approx(0.5)
    _x, best = theory.optimal_line.getData()
    assert best[160] == optimal_k(0.8, 0.5, k_max=64)


# ---------------------------------------------------------------- race


def test_race_lanes_follow_the_newest_tokens_and_plot_both_lanes(qtbot, models):
    view = RaceView()
    qtbot.addWidget(view)
    view.resize(700, 420)
    view.show()
    view.begin("draft-model, K = 4, greedy")
    items = list(Race(models).generate(PROMPT, DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=120)))
    for item in items:
        view.on_event(item)
    view.finished()
    qtbot.waitUntil(lambda: not view.replaying, timeout=30_000)
    result = items[-1]
    assert isinstance(result, RaceResult)
    for lane in LANES:
        bar = view.lanes[lane].stream.verticalScrollBar()
        qtbot.waitUntil(lambda bar=bar: bar.maximum() > 0 and bar.value() == bar.maximum())  # newest tokens in view
        points = view.charts.series(lane)
        assert points[0] == (0.0, 0) and points[-1][1] == view.lanes[lane].tokens
        assert [t for t, _n in points] == sorted(t for t, _n in points)
    spec_passes = [i.event for i in items[:-1] if i.lane == SPECULATIVE and isinstance(i.event, PassEvent)]
    assert len(view.charts.pass_ms) == len(spec_passes)
    assert view.charts.pass_ms[0] == (spec_passes[0].timing.draft_ms, spec_passes[0].timing.verify_ms)
    assert view.headline.text().startswith(("Speculative decoding won", "Plain decoding won"))
    assert "\n" not in view.headline.text() and "identical" in view.verdict.text()


def raced(qtbot, models, prompt: str = PROMPT, **settings) -> tuple[RaceView, RaceResult]:
    """A race view that has replayed one finished race of these settings."""
    view = RaceView()
    qtbot.addWidget(view)
    view.resize(900, 500)
    view.show()
    view.begin("draft-model, K = 4")
    items = list(Race(models).generate(prompt, DecodeSettings(drafters=("draft-model",), k=4, **settings)))
    for item in items:
        view.on_event(item)
    view.finished()
    qtbot.waitUntil(lambda: not view.replaying, timeout=30_000)
    result = items[-1]
    assert isinstance(result, RaceResult)
    return view, result


def test_asd_race_highlights_the_tokens_that_differ_from_strict_greedy(qtbot, models):
    view, result = raced(qtbot, models, "The quick brown fox jumps over the lazy dog. The quick", max_new_tokens=30,
                         verify="asd", asd=AsdSettings(budget=50.0, gate=5.0, cap=4))
    plain, spec = result.plain.token_ids, result.speculative.token_ids
    assert not result.identical, "the loose budget should make ASD part from strict greedy on random models"
    lane = view.lanes[SPECULATIVE]
    changed = changed_positions(spec, plain)
    assert changed and lane.highlighted_tokens() == changed  # exactly the tokens the alignment does not match
    first = result.first_divergence
    assert first is not None and plain[:first] == spec[:first] and lane.underlined_token() == first
    assert all(t >= first for t in changed)  # nothing before the first divergence is marked
    assert lane.diff_legend.isVisible()
    legend = lane.diff_legend.text()
    assert f"first divergence at generated token {first + 1}" in legend and "highlighted" in legend
    assert f"Regret spent {result.speculative.asd.spent:.3g}" in legend and "ASD spent regret" in view.verdict.text()
    assert view.lanes[PLAIN].highlighted_tokens() == [] and not view.lanes[PLAIN].diff_legend.isVisible()
    view.replay()  # a replay starts unmarked and marks again at its end
    assert lane.highlighted_tokens() == [] and not lane.diff_legend.isVisible()
    qtbot.waitUntil(lambda: not view.replaying, timeout=30_000)
    assert lane.highlighted_tokens() == changed


def test_greedy_and_sampled_races_highlight_nothing(qtbot, models):
    view, result = raced(qtbot, models, max_new_tokens=30, verify="greedy")
    assert result.identical
    for lane in LANES:
        assert view.lanes[lane].highlighted_tokens() == [] and view.lanes[lane].underlined_token() is None
        assert not view.lanes[lane].diff_legend.isVisible()
    view, result = raced(qtbot, models, max_new_tokens=30, verify="sample", sampling=SAMPLING, seed=3)
    assert all(view.lanes[lane].highlighted_tokens() == [] for lane in LANES)
    assert not result.identical  # sampled lanes draw differently: said in words, not marked token by token
    assert "not comparable token by token" in view.verdict.text()


# ---------------------------------------------------------------- window


def test_clicking_a_token_raises_the_inspector(qtbot, fake_window):
    from app.widgets import on_screen
    from tests.widgets.helpers import run_to_end

    window = fake_window
    window.controls.prompt.setPlainText("hello")
    window.controls.max_tokens.setValue(30)
    run_to_end(qtbot, window)
    window.theory_dock.raise_()
    qtbot.waitUntil(lambda: on_screen(window.theory) and not on_screen(window.inspector))
    window.token_view.select_pass(2)  # what a click on one of that pass's tokens does
    qtbot.waitUntil(lambda: on_screen(window.inspector))
    assert window.inspector.inspection.event.index == window.session.passes[2].index


def test_previous_and_next_move_the_highlight_in_the_text(qtbot, fake_window):
    from PySide6.QtCore import Qt

    from tests.widgets.helpers import run_to_end

    window = fake_window
    window.controls.prompt.setPlainText("hello")
    window.controls.max_tokens.setValue(30)
    run_to_end(qtbot, window)

    def highlighted_pass():
        (selection,) = window.token_view.extraSelections()
        start = selection.cursor.selectionStart()
        token = next(i for i in range(window.token_view.token_count) if window.token_view.token_start(i) == start)
        return window.token_view.token_info(token)[0].index

    window.token_view.select_pass(2)  # a click on a token of pass 2
    assert highlighted_pass() == window.session.passes[2].index
    qtbot.mouseClick(window.inspector.next_button, Qt.MouseButton.LeftButton)
    assert window.inspector.inspection.event.index == highlighted_pass() == window.session.passes[3].index
    qtbot.mouseClick(window.inspector.previous_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(window.inspector.previous_button, Qt.MouseButton.LeftButton)
    assert highlighted_pass() == window.session.passes[1].index
