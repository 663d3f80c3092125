"""The ASD trade-off view: the bench's frontier, the knobs g, M, B mirrored from the drafter panel."""

from __future__ import annotations

import json

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QApplication

from app.asd_plot import draw_frontier
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
    assert "No ASD sweep" in view.message.text() and "bench asd" in view.message.text()
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


def _frontier_plot(qtbot, size: tuple[int, int]):
    """The committed sweep drawn by draw_frontier into a plot of its own, as the PNG is (legend in the plot)."""
    widget = pg.PlotWidget()
    _kept.append(widget)  # alive until the test ends
    qtbot.addWidget(widget)
    widget.resize(*size)
    draw_frontier(widget.getPlotItem(), json.loads(DEFAULT_SWEEP.read_text()))
    widget.show()
    qtbot.waitUntil(lambda: widget.getPlotItem().getViewBox().width() > 0)
    return widget.getPlotItem()


_kept: list = []


@pytest.fixture(autouse=True)
def _release_plots():
    yield
    _kept.clear()


@pytest.mark.parametrize("size", [(1100, 700), (700, 300)])
def test_the_legend_stands_beside_the_points_on_a_solid_background(qtbot, size):
    plot = _frontier_plot(qtbot, size)
    legend, box = plot.legend, plot.getViewBox()
    qtbot.waitUntil(lambda: legend.sceneBoundingRect().left() > box.sceneBoundingRect().right())
    assert not legend.sceneBoundingRect().intersects(box.sceneBoundingRect())  # covers no point at any size
    assert legend.brush().color().alpha() == 255
    names = [label.text for _sample, label in legend.items]
    assert "strict greedy (1, 0)" in names and "draft-model frontier" in names


@pytest.mark.parametrize("size", [(1024, 700), (1600, 1000)])
def test_in_the_window_the_legend_is_in_the_side_column_and_the_y_title_shows_whole(fake_window, qtbot, size):
    window = fake_window
    window.resize(*size)
    window.asd_dock.show()
    window.asd_dock.raise_()
    view = window.asd_view
    qtbot.waitUntil(lambda: view.plot_widget.isVisible() and view.legend_view.isVisible())
    assert view.legend.scene() is not view.plot.scene()  # not over the plot
    assert view.legend_view.height() >= view.legend.geometry().height()  # the whole key shows
    assert [label.text for _sample, label in view.legend.items][-1] == "at the panel's knobs"
    axis = view.plot.getAxis("left")
    assert axis.labelText == "Δ log p per token (nats)"
    qtbot.waitUntil(lambda: axis.height() > 0)
    assert axis.label.boundingRect().width() <= axis.height()  # the rotated title is not cut


@pytest.mark.parametrize("size", [(700, 300), (1300, 500)])
def test_point_labels_are_in_the_window_font_and_their_own_line_never_crosses_them(qtbot, size):
    plot = _frontier_plot(qtbot, size)
    labels = [item for item in plot.items if isinstance(item, pg.TextItem)]
    assert labels and all(label.textItem.font().family() == QApplication.font().family() for label in labels)
    frontiers = [curve for curve in plot.listDataItems() if curve.name()]
    lines = {curve.opts["pen"].color().name(): curve.getData() for curve in frontiers}
    for label in labels:  # over every line, on a fill: another drafter's line passes under it, not through it
        assert label.fill.color().alpha() > 0 and label.zValue() > max(curve.zValue() for curve in frontiers)
        box = label.mapRectToView(label.boundingRect())
        xs, ys = lines[label.color.name()]
        for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:], strict=False):
            for t in np.linspace(0.0, 1.0, 200):
                assert not box.contains(QPointF(x0 + t * (x1 - x0), y0 + t * (y1 - y0))), label.textItem.toPlainText()
