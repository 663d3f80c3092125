"""The ASD trade-off view: the speed / fidelity frontier of the last bench, and where the knobs g, M, B sit on it.

Reads the JSON that `python -m app bench asd --json FILE` writes (app/bench/asd.py; the committed one is
docs/asd-frontier.json) and draws it with app/asd_plot.py's `draw_frontier`: x = tokens/s relative to strict greedy
with the same drafter, y = mean log-probability delta per token against it (docs/ALGORITHMS.md §5.6), one colour per
drafter, the defaults as stars; the key stands at the top of the side column, off the points. The drafter panel's
current (B, g, M) are mirrored in read-only labels and ringed on the sweep's points measured at those knobs.

A run in the window is not placed on the x axis: its speed relative to strict greedy needs a strict run on the same
prompt, which the window does not make. After an ASD run the caption gives what it did measure instead (tokens
kept beyond strict greedy on the same logits, passes saved, regret spent of B).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFileDialog, QFormLayout, QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

import app
from app.asd_plot import Z_MARKS, draw_frontier, legend_item
from app.engine.events import AsdSummary
from app.engine.settings import AsdSettings
from app.widgets import scrolled

DEFAULT_SWEEP = Path(app.__file__).resolve().parent.parent / "docs" / "asd-frontier.json"
NO_SWEEP = ("No ASD sweep to show: {why}. Run `python -m app bench asd --json FILE` and open it with "
            "File → Open ASD sweep…")
CAPTION = ("Each point is one (B, g, M) measured by the bench on its prompts; the ring marks the points at the "
           "drafter panel's knobs. A run here is not placed on the x axis: its speed against strict greedy would "
           "need a strict run on the same prompt.")


def _budget_text(budget: float) -> str:
    return "inf" if math.isinf(budget) else f"{budget:g}"


class AsdTradeoffView(QWidget):
    sig_loaded = Signal(object)  # Path of the sweep now shown, or None when there is none

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.data: dict | None = None
        self.path: Path | None = None
        self.knobs = AsdSettings()
        self.plot_widget = pg.PlotWidget()
        self.plot_widget.setBackground(None)
        self.plot_widget.setMinimumSize(320, 160)  # the dock does not scroll: the side column does
        self.plot = self.plot_widget.getPlotItem()
        # The key beside the plot, at the top of the side column: over the plot it would hide points.
        self.legend = legend_item(ink=self.palette().text().color(), paper=self.palette().window().color())
        self.legend_view = pg.GraphicsLayoutWidget()
        self.legend_view.setBackground(None)
        self.legend_view.setFrameShape(QFrame.Shape.NoFrame)
        self.legend_view.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.legend_view.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.legend_view.ci.setContentsMargins(0, 0, 0, 0)
        self.legend_view.ci.addItem(self.legend)
        self.legend_view.ci.layout.setAlignment(self.legend, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.message = QLabel()
        self.message.setObjectName("asdSweepMessage")
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.source = QLabel()
        self.source.setWordWrap(True)
        self.caption = QLabel(CAPTION)
        self.caption.setWordWrap(True)
        self.run_line = QLabel("No ASD run yet.")
        self.run_line.setWordWrap(True)
        self.budget_label, self.gate_label, self.cap_label = QLabel(), QLabel(), QLabel()
        self.at_knobs = QLabel()
        self.at_knobs.setWordWrap(True)
        knobs = QFormLayout()
        knobs.addRow("Budget B", self.budget_label)
        knobs.addRow("Gate g", self.gate_label)
        knobs.addRow("Block cap M", self.cap_label)
        side = QVBoxLayout()
        title = QLabel("<b>Knobs</b> (edit them in Drafters and verification)")
        title.setWordWrap(True)
        side.addWidget(self.legend_view)
        side.addWidget(title)
        side.addLayout(knobs)
        side.addWidget(self.at_knobs)
        side.addWidget(self.run_line)
        side.addWidget(self.caption)
        side.addWidget(self.source)
        side.addStretch(1)
        side_widget = QWidget()
        side_widget.setLayout(side)
        side_scroll = scrolled(side_widget)
        side_scroll.setFixedWidth(300)
        row = QHBoxLayout()
        row.addWidget(self.plot_widget, 1)
        row.addWidget(side_scroll)
        column = QVBoxLayout(self)
        column.setContentsMargins(4, 4, 4, 4)
        column.addWidget(self.message)
        column.addLayout(row, 1)
        self._rings: pg.ScatterPlotItem | None = None
        self.show_knobs(self.knobs)

    # --- the sweep -----------------------------------------------------------------
    def load(self, path: str | Path | None = None) -> bool:
        """Show the sweep in `path` (default: docs/asd-frontier.json); False, with the reason shown, if none."""
        path = Path(path) if path is not None else DEFAULT_SWEEP
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("points"), list):
                raise ValueError("it has no list of points")
        except FileNotFoundError:
            return self._none(f"{path} does not exist")
        except (OSError, ValueError) as error:
            return self._none(f"{path} is not a sweep JSON ({error})")
        self.data, self.path = data, path
        self.plot.clear()
        self.legend.clear()
        try:
            draw_frontier(self.plot, data, ink=self.palette().text().color(), label_points=7,
                          paper=self.palette().window().color(), legend=self.legend)
        except (KeyError, TypeError) as error:
            return self._none(f"{path} lacks a field of a sweep point ({error})")
        self._rings = pg.ScatterPlotItem([], [], symbol="o", size=26, brush=None,
                                         pen=pg.mkPen(self.palette().text().color(), width=2))
        self._rings.setZValue(Z_MARKS)  # over the points' labels
        self.plot.addItem(self._rings)
        self.legend.addItem(self._rings, "at the panel's knobs")
        key = self.legend.effectiveSizeHint(Qt.SizeHint.PreferredSize)
        self.legend_view.setFixedHeight(math.ceil(key.height()) + 2)  # the whole key, with its frame
        self.legend_view.show()
        self.plot_widget.show()
        self.caption.show()
        self.message.hide()
        meta = data.get("meta", {})
        self.source.setText(f"Sweep: {path} — {meta.get('target', '?')} on {meta.get('device', '?')}, "
                            f"k = {meta.get('k', '?')}, {len(meta.get('prompts', []))} prompts")
        self._mark_knobs()
        self.sig_loaded.emit(path)
        return True

    def _none(self, why: str) -> bool:
        self.data, self.path = None, None
        self.plot.clear()
        self.plot_widget.hide()
        self.legend_view.hide()
        self.caption.hide()
        self.source.setText("")
        self.message.setText(NO_SWEEP.format(why=why))
        self.message.show()
        self._rings = None
        self._mark_knobs()
        self.sig_loaded.emit(None)
        return False

    def choose_file(self) -> None:
        start = str(self.path or DEFAULT_SWEEP)
        path, _ = QFileDialog.getOpenFileName(self, "Open ASD sweep", start, "ASD sweep JSON (*.json)")
        if path:
            self.load(path)

    def drafters(self) -> list[str]:
        """The drafters of the sweep shown, in its order (one curve each)."""
        return list(dict.fromkeys(p["drafter"] for p in self.data["points"])) if self.data else []

    def default_points(self) -> list[dict]:
        return [p for p in self.data["points"] if p["is_default"]] if self.data else []

    def knob_points(self) -> list[dict]:
        """The sweep's points measured at the current knobs (one per drafter, or none off its grid)."""
        if not self.data:
            return []
        k = self.knobs
        return [p for p in self.data["points"] if p["budget_text"] == _budget_text(k.budget)
                and math.isclose(p["gate"], k.gate) and p["cap"] == k.cap and p["log_prob_delta"] is not None]

    # --- the knobs and the run -------------------------------------------------------
    def show_knobs(self, knobs: AsdSettings) -> None:
        """Mirror the drafter panel's B, g, M and ring their points on the sweep."""
        self.knobs = knobs
        self.budget_label.setText("unbounded" if math.isinf(knobs.budget) else f"{knobs.budget:g}")
        self.gate_label.setText(f"{knobs.gate:g}")
        self.cap_label.setText(f"{knobs.cap}")
        self._mark_knobs()

    def _mark_knobs(self) -> None:
        points = self.knob_points()
        if self._rings is not None:
            self._rings.setData([p["relative_tokens_per_s"] for p in points], [p["log_prob_delta"] for p in points])
        if not self.data:
            self.at_knobs.setText("")
        elif not points:
            self.at_knobs.setText("The sweep did not measure these knobs: no point is ringed.")
        else:
            self.at_knobs.setText("At these knobs the sweep measured:<br>" + "<br>".join(
                f"{p['drafter']}: ×{p['relative_tokens_per_s']:.2f} tokens/s, {p['log_prob_delta']:+.2f} nats/token"
                for p in points))

    def show_run(self, summary: AsdSummary | None, tokens: int, passes: int) -> None:
        """What the last ASD run measured (its end event's summary); None: the last run was not ASD."""
        if summary is None:
            return
        budget = "unbounded" if math.isinf(summary.budget) else f"{summary.budget:g}"
        self.run_line.setText(
            f"<b>Last ASD run</b>: {summary.saved} of {tokens} tokens kept beyond strict greedy on the same "
            f"logits ({summary.exceptions} exceptions, {summary.reused} reused), ≈ {summary.passes_saved:.1f} "
            f"passes saved of {passes + summary.passes_saved:.0f}; regret spent {summary.spent:.3g} of B = {budget}.")
