"""Token trees in the window: the inspector's tree, the stream's branch counts, the panel's live toggle, persistence."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.loading import load_models
from app.engine.settings import DecodeSettings, SamplingSettings
from app.session import Session
from app.widgets.drafter_panel import DrafterPanel
from app.widgets.inspector import PassInspector
from app.widgets.token_view import TokenView, tooltip_text
from app.widgets.tree_view import APPENDED, ROOT, branch_count, main_line
from tests.widgets.fakes import FakeEngine
from tests.widgets.helpers import run_to_end

PROMPT = "def add(a, b):"


@pytest.fixture(scope="module")
def self_decoder(tiny_llama):
    """The tiny target drafting for itself: real trees whose paths the target accepts, beside rejected branches."""
    target, _draft = tiny_llama
    return SpeculativeDecoder(load_models(str(target), str(target), device="cpu", dtype="float32"))


def tree_session(decoder, **settings) -> Session:
    session = Session()
    session.begin()
    for event in decoder.generate(PROMPT, DecodeSettings(drafters=("draft-model",), k=4, tree=16, max_new_tokens=16,
                                                         **settings)):
        session.on_event(event)
    return session


def inspector_for(qtbot, session: Session) -> PassInspector:
    inspector = PassInspector()
    qtbot.addWidget(inspector)
    inspector.set_session(session)
    inspector.resize(1400, 600)
    inspector.show()
    return inspector


@pytest.mark.parametrize("verify", ["greedy", "sample"])
def test_the_inspector_draws_every_node_of_a_tree_pass(qtbot, self_decoder, verify):
    session = tree_session(self_decoder, verify=verify, sampling=SamplingSettings(top_k=5))
    inspector = inspector_for(qtbot, session)
    event = max((e for e in session.passes if e.tree), key=lambda e: (len(e.path), branch_count(e.tree)))
    assert event.path and branch_count(event.tree) > 1  # a real tree with an accepted path
    inspector.show_pass(event.index)
    view = inspector.tree_view
    assert view.isVisible()

    assert sorted(view.node_keys()) == [node.id for node in event.tree]  # every node drawn, once
    for node in event.tree:
        assert view.style_of(node.id) == node.outcome
        tip = view.tooltip(node.id)
        q = "one-hot" if node.q is None else f"q(x) = {node.q:.4f}"
        assert f"p(x) = {node.p:.4f}" in tip and q in tip, tip
        if verify == "sample" and node.accept_prob is not None:
            assert f"acceptance probability = {node.accept_prob:.4f}" in tip
    assert {key for key in view.on_path() if key >= 0} == set(event.path)
    assert all(view.style_of(key) == "accepted" for key in event.path)
    # The appended token is one more box at the end of the path, in its own colour.
    assert view.style_of(APPENDED) == event.appended.kind
    assert view.rect_of(APPENDED).left() > view.rect_of(event.path[-1]).right()
    assert view.rect_of(event.path[0]).left() > view.rect_of(ROOT).right()

    # A click on a main-line box selects its table row; the selected row's box is outlined.
    first = event.path[0]
    qtbot.mouseClick(view.canvas, Qt.MouseButton.LeftButton, pos=view.rect_of(first).center().toPoint())
    assert inspector.table.currentRow() == 0 and view.selected == first
    inspector.table.selectRow(len(event.drafted))  # the appended token's row
    assert view.selected == APPENDED
    assert main_line(event)[: len(event.path)] == list(event.path)


def test_a_chain_pass_shows_no_tree(qtbot, self_decoder):
    session = Session()
    session.begin()
    for event in self_decoder.generate(PROMPT, DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=6)):
        session.on_event(event)
    inspector = inspector_for(qtbot, session)
    inspector.show_pass(0)
    assert session.passes[0].tree is None
    assert not inspector.tree_view.isVisible() and inspector.block.text().startswith("Draft block")


def test_the_stream_counts_each_tree_pass_branches_and_copies_without_them(qtbot, self_decoder):
    session = tree_session(self_decoder)
    view = TokenView()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.set_session(session)
    view.show()
    view.set_hide_rejected(True)  # the document is then the prompt and the committed text, and the marks
    expected = [f"⋔{branch_count(e.tree)}" for e in session.passes if e.tree and branch_count(e.tree) > 1]
    assert expected and view.tree_marks() == expected
    view.selectAll()
    assert view.selected_text() == session.start.prompt_text + session.streamed_text
    event, token = view.token_info(view.token_count - 2)
    assert "token tree" in tooltip_text(event, token)
    # Tokens end where a mark starts: the last token of a tree pass is not stretched over its count.
    for index in range(view.token_count):
        start = view.token_start(index)
        assert view.token_at(start) == index


def test_the_tree_toggle_writes_the_node_budget_live_and_is_off_under_asd(qtbot, fake_window):
    window = fake_window
    panel = window.drafters
    assert window.live.get().tree is None and panel.k_label.text() == "K"
    with qtbot.waitSignal(panel.sig_changed, timeout=2_000):
        panel.tree.setChecked(True)
        panel.tree_nodes.setValue(24)
    assert window.live.get().tree == 24
    assert panel.k_label.text() == "K (depth)" and "depth limit" in panel.k_spin.toolTip()

    with qtbot.waitSignal(panel.sig_changed, timeout=2_000):
        panel.set_rule("asd")
    assert window.live.get().tree is None and window.live.get().verify == "asd"
    assert not panel.tree.isEnabled() and "ASD is a chain rule" in panel.tree.toolTip()
    assert panel.error.isHidden()  # never an invalid combination

    with qtbot.waitSignal(panel.sig_changed, timeout=2_000):
        panel.set_rule("greedy")
    assert window.live.get().tree == 24 and panel.tree.isEnabled()

    window.settings_model.use(verify="asd")  # a ready prompt's ASD set-up with the tree on
    assert window.live.get().verify == "asd" and window.live.get().tree is None


def test_drafters_that_cannot_branch_say_they_propose_one_branch(qtbot):
    panel = DrafterPanel()
    qtbot.addWidget(panel)
    panel.set_available(("draft-model", "mtp"), 4, 1)
    panel.show()
    panel.set_drafters(("mtp",))
    panel.tree.setChecked(True)
    assert panel.tree.isEnabled() and panel.changes()["tree"] == 16
    assert "one branch" in panel.tree_note.text() and "one branch" in panel.tree.toolTip()
    assert panel.tree_note.isVisible()
    panel.set_drafters(("draft-model", "mtp"))
    assert not panel.tree_note.isVisible()


def test_the_token_tree_persists_between_launches(qtbot, make_window, store):
    first = make_window(FakeEngine())
    first.drafters.tree.setChecked(True)
    first.drafters.tree_nodes.setValue(40)
    first.drafters.flush()
    first.close()

    second = make_window(FakeEngine())
    assert second.live.get().tree == 40
    assert second.drafters.tree.isChecked() and second.drafters.tree_nodes.value() == 40
    assert second.drafters.tree_slider.value() == 40


def test_a_tree_run_in_the_window_shows_its_tree_in_the_inspector(qtbot, real_window):
    window = real_window
    window.drafters.set_drafters(("draft-model",))
    window.drafters.k_spin.setValue(3)
    window.drafters.tree.setChecked(True)
    window.drafters.tree_nodes.setValue(12)
    window.controls.max_tokens.setValue(10)
    run_to_end(qtbot, window)

    passes = window.session.passes
    trees = [row for row, event in enumerate(passes) if event.tree]
    assert trees and all(len(passes[row].tree) <= 12 for row in trees)
    row = max(trees, key=lambda r: len(passes[r].tree))
    window.token_view.select_pass(row)  # as a click on one of its tokens
    inspector = window.inspector
    assert inspector.inspection.event.index == passes[row].index
    assert inspector.tree_view.isVisibleTo(window.inspector_dock)
    assert len(inspector.tree_view.node_keys()) == len(passes[row].tree)
    assert "token tree of" in inspector.header.text()
    series = window.session.series["expected_tokens"]
    assert all(series[r] >= 1.0 for r in trees)  # the chart's theory line has a value for every tree pass
    QApplication.processEvents()


def test_hovering_a_tree_node_shows_its_tooltip(qtbot, self_decoder, monkeypatch):
    session = tree_session(self_decoder)
    inspector = inspector_for(qtbot, session)
    event = next(e for e in session.passes if e.tree)
    inspector.show_pass(event.index)
    canvas = inspector.tree_view.canvas
    shown = []
    monkeypatch.setattr("app.widgets.tree_view.QToolTip.showText", lambda _pos, text, *_: shown.append(text))
    point = inspector.tree_view.rect_of(event.tree[0].id).center().toPoint()
    QApplication.sendEvent(canvas, QHelpEvent(QHelpEvent.Type.ToolTip, point, canvas.mapToGlobal(point)))
    assert shown == [inspector.tree_view.tooltip(event.tree[0].id)] and "p(x)" in shown[0]
    QApplication.sendEvent(canvas, QHelpEvent(QHelpEvent.Type.ToolTip, QPoint(1, 1), canvas.mapToGlobal(QPoint(1, 1))))
    assert len(shown) == 1  # empty space: nothing
