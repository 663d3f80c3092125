"""The status bar never widens the window: long model names, a long message and a load's progress shrink with
"…" (the full text in the tooltip), the message keeps a gap before what follows it, and a load's step takes
the place of the last run's figures."""

from __future__ import annotations

import dataclasses
import itertools

from tests.widgets.fakes import FAKE_SUMMARY, FakeEngine

TARGET = "Qwen/Qwen2.5-3B-Instruct"
DRAFT = "Qwen/Qwen2.5-0.5B-Instruct"
MESSAGE = "Finished: max tokens after 412 passes; " + "a message much longer than any window is wide " * 6
STEP = "compiling layer skip (3 layers): tree round 8 rows (16/16)"


def hub_engine() -> FakeEngine:
    engine = FakeEngine()
    engine.summary = dataclasses.replace(FAKE_SUMMARY, target_name=TARGET, draft_name=DRAFT, device="cuda:0",
                                         dtype="bfloat16", execution="static cache, compiled")
    return engine


def fill(status) -> None:
    status.show_run(1234.5, 0.83, 412, 2048, 0.61)
    status.showMessage(MESSAGE)


def labels(status):
    return (status.message_label, status.models_label, status.device_label, status.speed_label,
            status.alpha_label, status.passes_label, status.load_label)


def laid_out(qtbot, window, width: int | None = None) -> None:
    """Wait until the window is `width` wide and its status line's items are where the line puts them."""
    line = window.status.line

    def settled() -> bool:
        sizes = line.widths(line.width())
        return ((width is None or window.width() == width) and line.geometry().right() < window.width()
                and all(w.width() == sizes[w] for w in sizes if w is not line.message))

    qtbot.waitUntil(settled)


def assert_cut_texts_in_tooltips(status) -> None:
    for label in labels(status):
        if label.isVisible() and label.elided():
            assert label.shown_text().count("…") == 1
            if label is status.models_label:
                assert TARGET in label.toolTip() and DRAFT in label.toolTip()
            else:
                assert label.text() in label.toolTip()


def test_long_names_a_long_message_and_a_load_never_widen_the_window(qtbot, make_window):
    window = make_window()
    window.resize(1024, 700)
    laid_out(qtbot, window, 1024)
    status = window.status
    rest = window.minimumSizeHint().width()  # what the window needs with nothing in its status bar
    assert rest < 1024

    window.set_engine(hub_engine())
    fill(status)
    laid_out(qtbot, window, 1024)
    assert status.minimumSizeHint().width() <= rest and window.minimumSizeHint().width() == rest
    assert status.message_label.elided() and status.message_label.shown_text().endswith("…")
    assert_cut_texts_in_tooltips(status)
    first_after = min(label.x() for label in labels(status)[1:] if label.isVisible())
    assert status.message_label.geometry().right() + 10 <= first_after  # a gap, never text running into text
    for label in (status.speed_label, status.passes_label):
        assert not label.elided()  # the run's figures are the last to be cut

    status.show_load_progress(STEP, 950, 1000)
    laid_out(qtbot, window, 1024)
    assert status.minimumSizeHint().width() <= rest and window.minimumSizeHint().width() == rest
    assert all(label.isHidden() for label in (status.speed_label, status.alpha_label, status.passes_label))
    assert status.load_label.isVisible() and status.load_bar.isVisible() and status.cancel_load_button.isVisible()
    assert status.load_label.text() == "Compiling layer skip (3 layers): tree round 8 rows (16/16)"
    assert not status.load_label.elided()  # the load's step is read first
    assert_cut_texts_in_tooltips(status)

    status.end_load_progress()  # cancelled: the window is as wide as before
    laid_out(qtbot, window, 1024)
    assert window.minimumSizeHint().width() == rest
    assert status.speed_label.isVisible() and status.load_label.isHidden()


def test_the_narrowest_window_still_holds_the_status_bar(qtbot, make_window):
    window = make_window(hub_engine())
    fill(window.status)
    window.status.show_load_progress(STEP + " and more words " * 10, 10, 1000)
    window.resize(window.minimumSizeHint().width(), 700)
    laid_out(qtbot, window, window.minimumSizeHint().width())
    line = window.status.line
    assert line.width() >= line.minimumSizeHint().width()
    shown = sorted((w for w in (*labels(window.status), window.status.load_bar, window.status.cancel_load_button)
                    if w.isVisible()), key=lambda w: w.x())
    assert all(left.geometry().right() < right.x() for left, right in itertools.pairwise(shown))  # no overlap
    assert all(w.x() >= 0 and w.geometry().right() < line.width() for w in shown)
    assert_cut_texts_in_tooltips(window.status)


def test_a_wide_window_shows_every_text_whole(qtbot, make_window):
    window = make_window(hub_engine())
    window.status.show_run(1234.5, 0.83, 412, 2048, 0.61)
    window.status.showMessage("Finished: max tokens after 412 passes")
    window.resize(1600, 1000)
    laid_out(qtbot, window, 1600)
    for label in labels(window.status):
        assert not label.elided()
    assert window.status.message_label.text() == "Finished: max tokens after 412 passes"
    assert window.status.currentMessage() == window.status.message_label.text()
    assert window.status.models_label.toolTip() == f"target: {TARGET}\ndraft: {DRAFT}"  # no cut text to add
    window.status.clearMessage()
    assert window.status.message_label.text() == ""


def test_the_run_figures_say_what_a_pass_costs_and_mark_a_loop_that_is_no_small_share(qtbot):
    from app.engine.events import RunningStats
    from app.widgets.status import RunStatusBar

    status = RunStatusBar()
    qtbot.addWidget(status)
    stats = RunningStats(alpha=0.8, tokens_per_pass=3.0, c=0.12, tokens_per_s=50.0, verify_cost=1.4, overhead=0.03)
    status.show_run(50.0, 0.8, 10, 30, 0.7, stats)
    assert status.passes_label.text() == "10 passes · 30 tokens · c 0.12 · v 1.40 · loop 3%"
    status.show_run(50.0, 0.8, 10, 30, 0.7, dataclasses.replace(stats, overhead=0.31))
    assert status.passes_label.text().endswith("loop 31%!")
    status.show_run(50.0, 0.8, 10, 30)
    assert status.passes_label.text() == "10 passes · 30 tokens"
