"""The ASD trade-off view: the bench's frontier, the knobs g, M, B mirrored from the drafter panel."""

from __future__ import annotations

import json

import pyqtgraph as pg

from app.engine.events import AsdSummary
from app.widgets.asd_tradeoff import DEFAULT_SWEEP, AsdTradeoffView


def _view(qtbot) -> AsdTradeoffView:
    view = AsdTradeoffView()
    qtbot.addWidget(view)
    view.show()
    return view


def _stars(view: AsdTradeoffView) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for item in view.plot.items if isinstance(item, pg.ScatterPlotItem)
            and item.opts["symbol"] == "star" for x, y in zip(*item.getData(), strict=True)]


def test_it_draws_one_frontier_per_drafter_of_the_committed_sweep_with_the_defaults_starred(qtbot):
    view = _view(qtbot)
    with qtbot.waitSignal(view.sig_loaded) as loaded:
        assert view.load()
    assert loaded.args == [DEFAULT_SWEEP]
    data = json.loads(DEFAULT_SWEEP.read_text())
    drafters = list(dict.fromkeys(p["drafter"] for p in data["points"]))
    assert len(drafters) == 4
    curves = [item.name() for item in view.plot.listDataItems() if item.name()]
    assert curves == [f"{d} frontier" for d in drafters]
    defaults = [(p["relative_tokens_per_s"], p["log_prob_delta"]) for p in data["points"] if p["is_default"]]
    assert len(defaults) == len(drafters) and sorted(_stars(view)) == sorted(defaults)
    assert not view.message.isVisible() and view.plot_widget.isVisible()
    assert {p["drafter"] for p in view.knob_points()} == set(drafters)  # the defaults' knobs: rings on the stars


def test_without_a_sweep_it_says_how_to_make_one(qtbot, tmp_path):
    view = _view(qtbot)
    with qtbot.waitSignal(view.sig_loaded) as loaded:
        assert not view.load(tmp_path / "missing.json")
    assert loaded.args == [None]
    assert view.message.isVisible() and not view.plot_widget.isVisible()
    assert "No ASD sweep" in view.message.text() and "bench --asd" in view.message.text()
    assert view.drafters() == [] and view.knob_points() == []
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert not view.load(tmp_path / "bad.json") and "not a sweep" in view.message.text()


def test_the_knob_labels_follow_the_drafter_panel(fake_window, qtbot):
    window = fake_window
    view = window.asd_view
    window.asd_dock.show()
    window.asd_dock.raise_()
    qtbot.waitUntil(lambda: view.gate_label.text() == "0.25" and view.budget_label.text() == "8")
    window.drafters.gate.setValue(1.0)
    window.drafters.budget.setValue(32.0)
    qtbot.waitUntil(lambda: (view.gate_label.text(), view.budget_label.text()) == ("1", "32"))
    assert view.cap_label.text() == "2"
    assert {(p["budget_text"], p["gate"]) for p in view.knob_points()} == {("32", 1.0)}  # the ring moved
    window.drafters.gate.setValue(0.3)  # not on the sweep's grid
    qtbot.waitUntil(lambda: view.gate_label.text() == "0.3")
    assert view.knob_points() == [] and "did not measure" in view.at_knobs.text()


def test_an_asd_run_is_described_not_placed_on_the_speed_axis(qtbot):
    view = _view(qtbot)
    view.load()
    view.show_run(AsdSummary(exceptions=3, spent=2.5, budget=8.0, remaining=5.5, reused=4, saved=7,
                             passes_saved=2.0), tokens=60, passes=20)
    assert "7 of 60 tokens" in view.run_line.text() and "regret spent 2.5 of B = 8" in view.run_line.text()
    assert "not placed on the x axis" in view.caption.text()


def test_frontier_labels_never_print_over_each_other_and_stay_inside_the_plot(qtbot):
    view = _view(qtbot)
    assert view.load()
    labels = [item for item in view.plot.items if isinstance(item, pg.TextItem)]
    data = json.loads(DEFAULT_SWEEP.read_text())
    frontier = [p for p in data["points"] if p["frontier"]]
    assert 0 < len(labels) <= len(frontier)
    xs = [p["relative_tokens_per_s"] for p in data["points"]]
    ys = [p["log_prob_delta"] for p in data["points"]]
    width, height = 0.14 * (max(xs) - min(xs)), 0.05 * (max(ys) - min(ys))
    spots = [(label.pos().x(), label.pos().y()) for label in labels]
    for i, (x, y) in enumerate(spots):
        assert all(abs(x - u) >= width or abs(y - v) >= height for u, v in spots[:i])
    rightmost = max(labels, key=lambda label: label.pos().x())
    assert rightmost.anchor.x() == 1  # written to the left of the fastest point, not past the edge
