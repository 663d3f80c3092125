"""Charts for a projector: every piece of chart text readable (WCAG contrast >= 4.5:1) in normal and presentation
mode, large text in presentation mode, a stable colour per drafter, the α axis to 1.0, staggered change labels,
slow motion said on the Throughput chart, pinned runs with a summary table, and figures for slides."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import pytest
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from app.engine.engine import LocalEngine
from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings
from app.session import Session
from app.settings_store import DEFAULT_REQUEST
from app.widgets import token_style as ts
from app.widgets.asd_tradeoff import AsdTradeoffView
from app.widgets.chart_export import (
    EXPORT_SCALE,
    save_html,
    save_item_png,
    save_item_svg,
    save_widget_png,
    save_widget_svg,
)
from app.widgets.chart_style import IntegerAxis, background_colour, text_colours
from app.widgets.charts import RunCharts
from app.widgets.compare import RunSummaryTable
from app.widgets.inspector import BarChart, PassInspector
from app.widgets.race import RaceCharts
from app.widgets.theme import OKABE_ITO, contrast_ratio, drafter_colour, theme_hub
from app.widgets.theory import TheoryExplorer
from app.widgets.token_view import TokenView
from tests.widgets.fakes import FakeEngine

WCAG_AA = 4.5
PRESENTATION_TEXT_PX = 16


@pytest.fixture
def hub():
    """The application's theme hub (back to normal after each test: tests/widgets/conftest.py)."""
    return theme_hub()


def fake_run(drafters_by_pass: list[str], session: Session | None = None) -> Session:
    """A session fed by the fake engine, switching drafter at the passes listed (one name per pass)."""
    session = session or Session()
    session.begin()
    live = LiveSettings(DecodeSettings(drafters=(drafters_by_pass[0],), max_new_tokens=10**6))
    events = FakeEngine().generate("prompt ", live, GenerationControl())
    session.on_event(next(events))
    for name in drafters_by_pass:
        live.update(drafters=(name,))
        session.on_event(next(events))
    session.flush()
    return session


def chart_views(qtbot, keep: list):
    """Every chart view with the plots whose text the theme colours: (view, plots); `keep` holds the widgets."""
    charts, theory, race = RunCharts(), TheoryExplorer(), RaceCharts()
    inspector, asd = PassInspector(), AsdTradeoffView()
    for widget in (charts, theory, race, inspector, asd):
        qtbot.addWidget(widget)
        keep.append(widget)
    asd.load()
    charts.set_session(fake_run(["draft-model"] * 10 + ["mtp"] * 10))
    charts.refresh()
    return [(charts.layout_widget, charts.text_plots()), (theory.plots, theory.text_plots()),
            (race, [race.progress, race.timing]), (inspector.bars, [inspector.bars.getPlotItem()]),
            (inspector.residual, [inspector.residual.getPlotItem()]), (asd.plot_widget, [asd.plot])]


@pytest.mark.parametrize("presentation", [False, True], ids=["normal", "presentation"])
def test_every_chart_text_has_wcag_aa_contrast_against_its_background(qtbot, hub, presentation):
    hub.set_presentation(presentation)
    checked = 0
    keep: list = []
    for view, plots in chart_views(qtbot, keep):
        background = background_colour(view)
        for plot in plots:
            for part, colour in text_colours(plot).items():
                ratio = contrast_ratio(colour, background)
                assert ratio >= WCAG_AA, f"{plot.titleLabel.text[:40]!r} {part}: {colour} on {background} = {ratio:.2f}"
                checked += 1
    assert checked >= 60  # titles, both axes' ticks and labels, legends of 13 plots
    charts = keep[0]
    labels = [marker.label for marker in charts.change_markers()]
    assert labels  # the fake run switched drafter once
    for label in labels:
        assert contrast_ratio(label.color.name(), background_colour(charts.layout_widget)) >= WCAG_AA


def test_presentation_mode_draws_chart_text_at_least_16_px(qtbot, hub):
    hub.set_presentation(True)
    keep: list = []
    for _view, plots in chart_views(qtbot, keep):
        for plot in plots:
            for name in ("left", "bottom"):
                assert plot.getAxis(name).style["tickFont"].pixelSize() >= PRESENTATION_TEXT_PX
            if plot.titleLabel.text:
                assert int(plot.titleLabel.opts["size"].removesuffix("px")) >= PRESENTATION_TEXT_PX


def test_a_drafter_keeps_its_colour_whatever_order_the_drafters_ran_in(qtbot, hub):
    session, charts = Session(), RunCharts()
    qtbot.addWidget(charts)
    charts.set_session(session)
    fake_run(["draft-model"] * 6 + ["prompt-lookup"] * 6, session)
    charts.refresh()
    first = charts.drafter_colours()
    fake_run(["prompt-lookup"] * 6 + ["ngram-cache"] * 6 + ["draft-model"] * 6, session)
    charts.refresh()
    second = charts.drafter_colours()
    assert list(first) == ["draft-model", "prompt-lookup"] and list(second)[0] == "prompt-lookup"
    for name in first:
        assert first[name] == second[name] == drafter_colour(name).lower()
    assert drafter_colour("mtp") != drafter_colour("draft-model")  # compared often: far apart in hue
    assert drafter_colour("draft-model") == OKABE_ITO["blue"]
    assert drafter_colour("my-drafter") == drafter_colour("my-drafter")  # unknown names: stable too


def test_alpha_axis_reaches_1_with_a_tick_and_headroom(qtbot, hub):
    charts = RunCharts()
    qtbot.addWidget(charts)
    low, high = charts.alpha_plot.viewRange()[1]
    assert low < 0.0 and high > 1.0
    ticks = charts.alpha_plot.getAxis("left")._tickLevels[0]  # noqa: SLF001 - pyqtgraph keeps set ticks only here
    assert (1.0, "1.0") in ticks and (0.0, "0.0") in ticks


def test_draft_position_axis_has_only_whole_number_ticks():
    axis = IntegerAxis("bottom")
    for low, high in ((0.5, 4.5), (0.6, 2.4), (0.0, 16.0)):
        values = [v for _spacing, level in axis.tickValues(low, high, 400) for v in level]
        assert values and all(float(v).is_integer() for v in values)


def test_close_change_labels_are_staggered_or_hidden_never_overlapping(qtbot, hub):
    charts = RunCharts()
    qtbot.addWidget(charts)
    charts.resize(900, 600)
    charts.show()
    switches = ["draft-model"] * 5 + ["prompt-lookup", "draft-model", "prompt-lookup", "draft-model", "ngram-cache"]
    charts.set_session(fake_run(switches + ["draft-model"] * 20))
    charts.refresh()
    QApplication.processEvents()  # the grid's final layout
    labels = [m.label for m in charts.change_markers() if m.label.isVisible()]
    assert labels
    boxes = [label.sceneBoundingRect() for label in labels]
    for i, box in enumerate(boxes):
        assert not any(box.intersects(other) for other in boxes[i + 1:])
    hidden = len(charts.change_markers()) - len(labels)
    assert hidden == 0 or f"{hidden} change label" in charts.alpha_plot.legend_note


def test_throughput_says_it_is_compute_speed_in_slow_motion(qtbot, hub):
    charts = RunCharts()
    qtbot.addWidget(charts)
    charts.set_session(fake_run(["draft-model"] * 10))
    charts.set_pass_interval(0.5)
    assert "compute speed" in charts.speed_plot.legend_note and "2 passes/s" in charts.speed_plot.legend_note
    charts.set_pass_interval(0.0)
    assert charts.speed_plot.legend_note == ""


# ---------------------------------------------------------------- compare runs

@pytest.fixture(scope="module")
def demo_engine():
    return LocalEngine.load(DEFAULT_REQUEST.with_changes(device="cpu"))  # the bundled family (HF_HUB_OFFLINE=1)


def real_run(engine, session: Session, drafters: tuple[str, ...], k: int) -> None:
    session.begin()
    live = LiveSettings(DecodeSettings(drafters=drafters, k=k, max_new_tokens=24))
    for event in engine.generate("def fibonacci(n):\n", live):
        session.on_event(event)


def test_two_pinned_runs_give_two_overlays_and_two_summary_rows_of_the_engines_figures(qtbot, hub, demo_engine):
    session, charts = Session(), RunCharts()
    qtbot.addWidget(charts)
    charts.set_session(session)
    ends = []
    for drafters, k in ((("draft-model",), 4), (("mtp",), 3)):
        real_run(demo_engine, session, drafters, k)
        ends.append(session.end)
        assert charts.pin_current() is not None
    assert [run.drafter for run in charts.pinned_runs()] == ["draft-model", "mtp"]
    for plot in (charts.alpha_plot, charts.tokens_plot, charts.speed_plot, charts.speedup_plot):
        assert charts.overlay_count(plot) == 2
    table: RunSummaryTable = charts.summary
    assert table.table.rowCount() == 2
    for row, end in enumerate(ends):
        stats = end.stats
        assert table.cell_text(row, "α") == f"{stats.alpha:.3f}"
        assert table.cell_text(row, "acceptance rate") == f"{stats.acceptance_rate:.3f}"
        assert table.cell_text(row, "tokens / pass") == f"{stats.tokens_per_pass:.2f}"
        assert table.cell_text(row, "E(α, K)") == f"{stats.expected_tokens_per_pass:.2f}"
        assert table.cell_text(row, "c") == f"{stats.c:.3f}"
        assert table.cell_text(row, "est. speedup") == f"{stats.estimated_speedup:.2f}×"
        length = getattr(getattr(end, "acceptance", None), "mean_acceptance_length", None)  # when reported
        assert table.cell_text(row, "mean acceptance length") == ("—" if length is None else f"{length:.2f}")
    assert "mtp" in table.cell_text(1, "run") and "K=3" in table.cell_text(1, "run")
    table.remove(0)
    assert table.table.rowCount() == 1 and "mtp" in table.cell_text(0, "run")
    charts.unpin_all()
    assert charts.overlay_count(charts.alpha_plot) == 0 and not charts.pinned_runs()


# ---------------------------------------------------------------- figures for slides

def test_a_chart_exports_as_png_at_twice_its_size_and_as_valid_svg(qtbot, hub, tmp_path):
    charts = RunCharts()
    qtbot.addWidget(charts)
    charts.resize(900, 700)
    charts.show()
    charts.set_session(fake_run(["draft-model"] * 12))
    charts.refresh()
    cell = charts.alpha_plot.parentItem()
    size = save_item_png(cell, tmp_path / "alpha.png")
    image = QImage(str(tmp_path / "alpha.png"))
    rect = cell.sceneBoundingRect().united(cell.mapRectToScene(cell.childrenBoundingRect()))  # with its legend
    assert (image.width(), image.height()) == (size.width(), size.height())
    assert image.width() == round(rect.width() * EXPORT_SCALE) and image.height() == round(rect.height() * EXPORT_SCALE)
    assert len({image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}) > 3
    save_item_svg(cell, tmp_path / "alpha.svg")
    root = ElementTree.parse(tmp_path / "alpha.svg").getroot()
    assert root.tag.endswith("svg") and len(list(root.iter())) > 10


def test_the_inspector_exports_as_png_and_svg_and_the_stream_as_html(qtbot, hub, tmp_path):
    inspector, view = PassInspector(), TokenView()
    for widget in (inspector, view):
        qtbot.addWidget(widget)
        widget.resize(640, 420)
    session = Session()
    inspector.set_session(session)
    view.set_session(session)
    view.show()
    fake_run(["draft-model"] * 8, session)
    qtbot.waitUntil(lambda: view.token_count > 0)
    inspector.show_pass(3)
    size = save_widget_png(inspector, tmp_path / "inspector.png")
    image = QImage(str(tmp_path / "inspector.png"))
    assert (image.width(), image.height()) == (size.width(), size.height()) == (640 * EXPORT_SCALE, 420 * EXPORT_SCALE)
    save_widget_svg(inspector, tmp_path / "inspector.svg")
    assert ElementTree.parse(tmp_path / "inspector.svg").getroot().tag.endswith("svg")
    save_html(view.document().toHtml(), tmp_path / "stream.html")
    text = (tmp_path / "stream.html").read_text(encoding="utf-8")
    assert "<html" in text and ts.LOOKS[ts.ACCEPTED].light in text.lower()  # the tokens keep their colours


def test_one_chart_can_fill_the_charts_alone_and_all_come_back(qtbot, hub):
    charts = RunCharts()
    qtbot.addWidget(charts)
    charts.resize(1400, 800)
    charts.show()
    charts.set_session(fake_run(["draft-model"] * 10))
    QApplication.processEvents()
    everything = charts.cell_rects()
    charts.focus_plot(3)
    QApplication.processEvents()
    assert charts.plot_titles()[3].startswith("Throughput")
    shown = [cell.isVisible() for cell in charts.layout_widget.ci.items]
    assert shown == [True] and charts.speed_plot.isVisible() and not charts.alpha_plot.isVisible()
    alone = charts.cell_rects()[3]
    assert alone.width() > 2 * everything[3].width() and alone.height() > 2 * everything[3].height()
    charts.focus_plot(None)
    QApplication.processEvents()
    assert len(charts.layout_widget.ci.items) == 5 and all(plot.isVisible() for plot in charts.text_plots())


def test_an_empty_race_shows_no_negative_axes_and_no_scale_factor(qtbot, hub):
    race = RaceCharts()
    qtbot.addWidget(race)
    race.resize(800, 300)
    race.show()
    QApplication.processEvents()
    for plot in (race.progress, race.timing):
        (x0, _x1), (y0, _y1) = plot.viewRange()
        assert x0 >= 0 and y0 >= 0
        for name in ("left", "bottom"):
            assert "x0" not in plot.getAxis(name).labelString()  # no "(x0.001)" beside the unit


def test_the_residuals_others_bar_does_not_set_the_range_and_a_one_hot_q_is_not_clipped(qtbot, hub):
    nan = float("nan")
    chart = BarChart("residual", ("p", "q", "residual"), ("#0072B2", "#E69F00", "#009E73"), open_last=True)
    qtbot.addWidget(chart)
    chart.show_bars(["a", "b", "others"], {"p": [0.2, 0.1, nan], "q": [nan, nan, nan],
                                            "residual": [0.1, 0.05, 0.85]}, None)
    top = chart.viewRange()[1][1]
    assert 0.2 < top < 0.85  # the tokens' bars fill the plot; "others" is cut at the top
    assert chart.cut_label.isVisible() and chart.cut_label.toPlainText() == "0.85 ↑"
    chart.show_bars(["a", "b", "others"], {"p": [0.2, 0.1, nan], "q": [1.0, 0.0, nan],
                                            "residual": [0.1, 0.05, 0.85]}, None)
    assert chart.viewRange()[1][1] >= 1.1  # the one-hot q bar whole, with headroom
    assert not chart.cut_label.isVisible()
