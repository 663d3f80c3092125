"""Window behaviour that does not need a model: exports, failures, persistence, the token view."""

from __future__ import annotations

import csv
import json

import pytest
from PySide6.QtCore import QPoint, QSettings, Qt
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from app.engine.settings import DecodeSettings, GenerationControl, LiveSettings
from app.session import Session
from app.widgets import token_style as ts
from app.widgets.token_view import TokenView, tooltip_text
from tests.widgets import fakes
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import format_at, fragment_outcomes, run_to_end


def test_exports_are_valid(qtbot, fake_window, tmp_path):
    window = fake_window
    window.controls.prompt.setPlainText("hello")
    window.drafters.set_rule("asd")
    window.controls.max_tokens.setValue(60)
    run_to_end(qtbot, window)
    session = window.session

    for kind, name in (("jsonl", "run.jsonl"), ("csv", "run.csv"), ("text", "run.txt"), ("png", "charts.png")):
        window.export_run(kind, str(tmp_path / name))

    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [line["type"] for line in lines] == [e.type for e in session.events]
    assert lines[0]["type"] == "start" and lines[-1]["type"] == "end"
    with open(tmp_path / "run.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(session.passes)
    assert [int(r["pass"]) for r in rows] == [p.index for p in session.passes]
    assert {r["verify"] for r in rows} == {"asd"}
    assert (tmp_path / "run.txt").read_text(encoding="utf-8") == session.generated_text != ""
    assert not QImage(str(tmp_path / "charts.png")).isNull()


def test_engine_failure_is_shown_and_the_window_stays_usable(qtbot, make_window):
    window = make_window(FakeEngine(fail_after=3))
    window.controls.prompt.setPlainText("keep me")
    run_to_end(qtbot, window)
    assert window.session.end.reason == "error"
    assert "fake drafter exploded" in window.banner.text()
    assert window.token_view.token_count > 0  # the text so far is kept
    assert window.controls.prompt_text == "keep me"

    window.set_engine(FakeEngine())
    run_to_end(qtbot, window)
    assert window.session.end.reason == "max_tokens"


def test_generate_without_prompt_or_models_explains_why(qtbot, make_window):
    window = make_window()
    assert not window.start_generation()
    assert "models" in window.banner.text()
    window.set_engine(FakeEngine())
    window.controls.prompt.clear()  # the bundled family's first prompt, cleared
    assert not window.start_generation()  # empty prompt
    assert "prompt" in window.banner.text()


def test_ctrl_enter_generates(qtbot, fake_window):
    window = fake_window
    window.controls.prompt.setPlainText("x")
    window.activateWindow()
    window.controls.prompt.setFocus()
    qtbot.waitUntil(window.isActiveWindow)
    with qtbot.waitSignal(window.sig_run_finished, timeout=10_000):
        qtbot.keyClick(window.controls.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert window.session.end is not None


def test_settings_persist_between_launches(qtbot, make_window, store):
    first = make_window(FakeEngine())
    first.drafters.k_spin.setValue(7)
    first.drafters.set_rule("sample")
    first.drafters.flush()
    first.controls.prompt.setPlainText("remember me")
    first.close()

    second = make_window(FakeEngine())
    assert second.live.get().k == 7 and second.live.get().verify == "sample"
    assert second.drafters.k_spin.value() == 7
    assert second.controls.prompt_text == "remember me"


def test_corrupted_settings_are_ignored(qtbot, make_window, store, caplog):
    store.setValue("decode/settings", "{not json")
    store.setValue("models/request", "[1, 2]")
    store.sync()
    window = make_window(FakeEngine())
    assert window.live.get() == DecodeSettings().with_changes(**window.drafters.changes())
    assert window.model_request.target is None
    assert sum("Saved settings ignored" in r.getMessage() for r in caplog.records) == 2


def test_unreadable_settings_file_is_ignored(qtbot, tmp_path):
    from app.main_window import MainWindow

    path = tmp_path / "broken.ini"
    path.write_bytes(b"\x00\xff[window\n=geometry=@ByteArray(\n\x00")
    window = MainWindow(settings=QSettings(str(path), QSettings.Format.IniFormat))
    qtbot.addWidget(window)
    assert window.live.get().k == DecodeSettings().k


# --- the token view -------------------------------------------------------------------------------

def fake_session(qtbot, passes: int, verify: str = "asd") -> Session:
    session = Session()
    live = LiveSettings(DecodeSettings(verify=verify, max_new_tokens=10**6))
    events = FakeEngine().generate("prompt ", live, GenerationControl())
    session.on_event(next(events))
    for _ in range(passes):
        session.on_event(next(events))
    return session


def test_token_view_formats_tooltips_and_clicks(qtbot):
    session = fake_session(qtbot, 40)
    view = TokenView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.set_session(session)
    view.show()
    session.flush()

    assert {ts.ACCEPTED, ts.REJECTED, ts.ASD_EXCEPTION, ts.RESAMPLED} <= fragment_outcomes(view)
    struck = [i for i in range(view.token_count) if view.token_info(i)[1].__class__.__name__ == "DraftedToken"
              and view.token_info(i)[1].outcome == "rejected"]
    fmt = format_at(view, view.token_start(struck[0]))
    assert fmt.fontStrikeOut() and fmt.fontItalic()

    event, token = view.token_info(struck[0])
    tip = tooltip_text(event, token)
    assert f"pass {event.index}" in tip and "p(x)" in tip and "regret" in tip and "min(1, p/q)" in tip

    index = view.token_count // 2
    rect = view.cursorRect(_cursor_at(view, view.token_start(index)))
    with qtbot.waitSignal(view.sig_pass_selected, timeout=1_000) as blocker:
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(rect.x() + 2, rect.center().y()))
    assert blocker.args == [view.token_info(view.token_at(view.token_start(index)))[0].index]

    view.set_hide_rejected(True)
    assert ts.REJECTED not in fragment_outcomes(view)


@pytest.mark.parametrize("words", [None, ["数", "字", "ab", "(", ")", "0"],
                                   ["abcdefgh", "数字数字数字数字"] * 200 + ["\n"]],
                         ids=["prose", "no-spaces", "long-lines"])
def test_token_view_keeps_paragraphs_short_over_20000_tokens(qtbot, monkeypatch, words):
    """What keeps appending and painting cheap at any length: no paragraph grows past about 2,000 characters
    (Qt lays out and paints a paragraph whole), even in text without spaces; every character maps to its token."""
    if words is not None:
        monkeypatch.setattr(fakes, "WORDS", words)
    session = fake_session(qtbot, 0)
    view = TokenView()
    qtbot.addWidget(view)
    view.set_session(session)
    view.show()
    events = FakeEngine().generate("p", LiveSettings(DecodeSettings(max_new_tokens=10**6)), GenerationControl())
    next(events)
    while view.token_count < 20_000:
        for _ in range(50):  # one refresh tick's worth of passes
            session.on_event(next(events))
        session.flush()
    block, longest = view.document().begin(), 0
    while block.isValid():
        longest = max(longest, block.length())
        block = block.next()
    assert longest <= 2_000 + 16  # + the token that crossed the limit, + the paragraph separator
    for position in range(view.token_start(0), view.document().characterCount() - 1, 97):
        index = view.token_at(position)
        assert index is not None and view.token_start(index) <= position
    # Copying shows the text's own line breaks, and none of the splits the view made for speed.
    kept = [view.token_info(i)[1] for i in range(view.token_count)]
    line_breaks = session.start.prompt_text.count("\n") + sum(
        token.text.count("\n") for token in kept if getattr(token, "outcome", None) != "rejected")
    view.selectAll()
    view.copy()
    copied = QApplication.clipboard().text()
    assert copied.count("\n") == line_breaks and len(copied) > 20_000
    if words is not None:
        assert view.document().blockCount() > line_breaks + 5  # the view did split lines


def _cursor_at(view, position: int):
    cursor = view.textCursor()
    cursor.setPosition(position)
    return cursor


def test_invalid_setting_shows_inline_and_keeps_the_live_value(qtbot, fake_window, monkeypatch):
    window = fake_window
    before = window.live.get()
    changes = window.drafters.changes()
    monkeypatch.setattr(window.drafters, "changes", lambda: {**changes, "sampling": {"top_p": 0.0}})
    assert window.push_settings() is None
    assert not window.drafters.error.isHidden() and "top-p" in window.drafters.error.text()
    assert window.live.get() is before


def test_charts_clear_then_keep_drawing(qtbot, fake_window):
    window = fake_window
    window.controls.prompt.setPlainText("x")
    window.controls.max_tokens.setValue(30)
    run_to_end(qtbot, window)
    window.charts.clear()
    assert set(window.charts.point_counts().values()) == {0}
    window.charts.reset()
    qtbot.waitUntil(lambda: set(window.charts.point_counts().values()) == {len(window.session.passes)})
