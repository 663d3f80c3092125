"""The Acceptance tab: the histogram against the i.i.d. prediction and the field's figures (§7.7)."""

from __future__ import annotations

import pytest

from app.settings_store import DEFAULT_REQUEST
from app.widgets.acceptance_histogram import (
    MEASURED_COLOUR,
    PREDICTED_COLOUR,
    TEXT_COLOUR,
    AcceptanceHistogramView,
    contrast_ratio,
)
from tests.widgets.helpers import run_to_end


@pytest.fixture(scope="module")
def bundled_engine():
    from app.engine.engine import LocalEngine

    return LocalEngine.load(DEFAULT_REQUEST.with_changes(device="cpu"))  # the bundled family (HF_HUB_OFFLINE=1)


def test_text_colours_are_readable_on_the_plot_background():
    for colour in (TEXT_COLOUR, MEASURED_COLOUR, PREDICTED_COLOUR):
        assert contrast_ratio(colour, "#FFFFFF") >= 4.5, colour
    assert contrast_ratio("#FFFFFF", "#FFFFFF") == pytest.approx(1.0)
    assert contrast_ratio("#000000", "#FFFFFF") == pytest.approx(21.0)


def test_after_a_real_run_the_tab_shows_the_engines_histogram_and_prediction(qtbot, make_window, bundled_engine):
    window = make_window(bundled_engine)
    window.controls.prompt.setPlainText("def fibonacci(n):")
    window.controls.max_tokens.setValue(40)
    window.acceptance_dock.show()
    window.acceptance_dock.raise_()
    with qtbot.waitSignal(window.session.sig_ended, timeout=60_000):
        run_to_end(qtbot, window, timeout=60_000)
    view: AcceptanceHistogramView = window.acceptance_view
    qtbot.waitUntil(lambda: view.summary is window.session.end.acceptance, timeout=5_000)
    summary = view.summary
    drafting = [p for p in window.session.passes if p.drafted]
    assert summary.drafting_passes == len(drafting) > 0
    assert view.bar_heights() == list(summary.histogram)
    assert sum(view.bar_heights()) == len(drafting)
    assert view.predicted_points() == pytest.approx(list(summary.predicted_histogram))
    assert sum(view.predicted_points()) == pytest.approx(len(drafting))
    assert f"{summary.mean_acceptance_length:.2f}" in view.figures.text()
    assert "mean acceptance length" in window.status.message_label.text()


def test_a_new_run_clears_the_histogram(qtbot, fake_window):
    window = fake_window
    window.controls.prompt.setPlainText("hello")
    window.acceptance_dock.show()
    window.acceptance_dock.raise_()
    run_to_end(qtbot, window)
    view = window.acceptance_view
    qtbot.waitUntil(lambda: view.summary is not None, timeout=5_000)
    assert sum(view.bar_heights()) == view.summary.drafting_passes
    window.session.sig_begun.emit()  # what a new run's start emits
    assert view.summary is None and view.bar_heights() == []
