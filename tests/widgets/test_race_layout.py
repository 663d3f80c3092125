"""The race view in the window at small and large sizes: the ASD lane's note under its text, the charts' keys
off their data."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.engine.events import AsdSummary
from app.engine.race import SPECULATIVE
from app.widgets.race import diff_legend
from tests.widgets.fakes import FakeEngine

SIZES = [(1024, 700), (1600, 1000)]


def _asd_race_shown(window) -> None:
    """The speculative lane as an ASD race leaves it: 120 tokens of ASD passes, most marked, and the regret note."""
    window.settings_model.use(verify="asd", max_new_tokens=120)
    lane = window.race_view.lanes[SPECULATIVE]
    for event in FakeEngine().generate("x", window.live, SimpleNamespace(wait_for_turn=lambda: True)):
        lane.add(event)
    changed = list(range(26, lane.tokens))
    asd = AsdSummary(exceptions=15, spent=6.05, budget=8.0, remaining=1.95, reused=8, saved=23, passes_saved=9.7)
    result = SimpleNamespace(first_divergence=0, speculative=SimpleNamespace(token_ids=tuple(range(lane.tokens))))
    lane.mark_diff(changed, 0, diff_legend(result, changed, asd))
    assert lane.highlighted_tokens() == changed


@pytest.mark.parametrize("size", SIZES)
def test_the_asd_note_lies_under_the_lane_text_inside_the_lane(qtbot, fake_window, size):
    window = fake_window
    window.resize(*size)
    window.race_dock.raise_()
    _asd_race_shown(window)
    lane = window.race_view.lanes[SPECULATIVE]
    note, text, clock = lane.diff_legend, lane.stream, lane.clock
    # laid out (the scroll area gives the view the height its wrapped text needs, the view gives it to the lane)
    qtbot.waitUntil(lambda: note.isVisible() and lane.height() >= lane.heightForWidth(lane.width()))
    assert note.height() >= note.heightForWidth(note.width())  # every line of the note shows
    assert not text.geometry().intersects(note.geometry())
    assert text.geometry().bottom() < note.geometry().top() and note.geometry().bottom() < clock.geometry().top()
    assert clock.geometry().bottom() <= lane.contentsRect().bottom()
    assert text.height() >= text.minimumHeight()


@pytest.mark.parametrize("size", SIZES)
def test_the_race_charts_keys_are_in_their_titles_not_over_the_data(qtbot, fake_window, size):
    window = fake_window
    window.resize(*size)
    window.race_dock.raise_()
    charts = window.race_view.charts
    qtbot.waitUntil(lambda: charts.isVisible() and charts.progress.getViewBox().height() > 0)
    for plot, names in ((charts.progress, ["plain", "speculative"]), (charts.timing, ["draft", "verify"])):
        assert plot.legend is None  # no legend box over the curves or the bars
        title = plot.titleLabel
        assert all(name in title.text for name in names)
        assert title.item.boundingRect().width() <= plot.width()  # the whole key shows
        assert not title.sceneBoundingRect().intersects(plot.getViewBox().sceneBoundingRect())
