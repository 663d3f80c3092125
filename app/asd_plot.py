"""The ASD frontier as a PNG, drawn with pyqtgraph offscreen (no window needed): `python -m app bench asd --plot`.

Reads the JSON of `app/bench/asd.py` (a dict), so a committed sweep can be redrawn without rerunning it:

    python -m app.asd_plot docs/asd-frontier.json docs/asd-frontier.png
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

COLOURS = {"draft-model": (31, 119, 180), "eagle": (214, 39, 40), "medusa": (44, 160, 44),
           "prompt-lookup": (148, 103, 189)}
OTHER = (127, 127, 127)


def _application():
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication([])


def save_frontier_png(data: dict, path: str | Path, width: int = 1100, height: int = 700) -> None:
    """Every point faint, each drafter's frontier as a line, the defaults (B = 8, g = 0.25, M = 2) as stars,
    strict greedy at (1, 0) as a cross."""
    app = _application()
    import pyqtgraph as pg
    import pyqtgraph.exporters  # registers ImageExporter

    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    widget = pg.PlotWidget()
    widget.resize(width, height)
    plot = widget.getPlotItem()
    plot.setTitle("ASD frontier: speed and fidelity against strict greedy with the same drafter")
    draw_frontier(plot, data)
    widget.show()  # laid out at its size (offscreen: nothing appears)
    app.processEvents()
    exporter = pg.exporters.ImageExporter(plot)
    exporter.parameters()["width"] = width
    exporter.export(str(path))
    widget.close()


class _Labels:
    """Which frontier points get a B/g/M label: none closer than a label's size to one already placed.

    Frontier points of several drafters bunch up (the same fast corner), and their labels would print over
    each other; a point left unlabelled still shows as a point on its drafter's line."""

    WIDTH, HEIGHT = 0.14, 0.05  # a label's extent as shares of the x and y ranges of the points

    def __init__(self, points: list[dict]) -> None:
        xs = [p["relative_tokens_per_s"] for p in points]
        ys = [p["log_prob_delta"] for p in points if p["log_prob_delta"] is not None]
        self.right_edge = max(xs) - self.WIDTH * (max(xs) - min(xs)) if xs else 0.0
        self.dx = self.WIDTH * ((max(xs) - min(xs)) if xs else 1.0) or 1.0
        self.dy = self.HEIGHT * ((max(ys) - min(ys)) if ys else 1.0) or 1.0
        self.placed: list[tuple[float, float]] = []

    def claim(self, point: dict) -> bool:
        x, y = point["relative_tokens_per_s"], point["log_prob_delta"]
        if any(abs(x - px) < self.dx and abs(y - py) < self.dy for px, py in self.placed):
            return False
        self.placed.append((x, y))
        return True

    def anchor(self, point: dict) -> tuple[float, float]:
        """Above and to the right of the point, a little clear of it and of the line that leaves it (frontier
        lines run right and down); near the right edge, where it would be cut off, to the left and below, clear
        of the line that comes in from the upper left."""
        return (1, -LABEL_GAP) if point["relative_tokens_per_s"] > self.right_edge else (0, 1 + LABEL_GAP)


LABEL_GAP = 0.3  # a point label's distance from its point, as a share of the label's height
Z_LABELS, Z_MARKS = 5, 6  # labels over every line and point; the stars, the cross and the rings over the labels


def legend_item(ink="k", paper="w"):
    """An empty legend for a layout (the plot's, or a view of its own beside the plot): solid, one entry a line.
    Its layout cell sizes and places it, as any layout item."""
    import pyqtgraph as pg
    from PySide6.QtWidgets import QSizePolicy

    class LaidOutLegend(pg.LegendItem):
        def updateSize(self) -> None:  # LegendItem would move itself to (0, 0) of its parent; ask for a new size
            self.updateGeometry()

    legend = LaidOutLegend(offset=None, pen=pg.mkPen(ink, width=1), brush=pg.mkBrush(paper), labelTextColor=ink,
                           verSpacing=-4)
    legend.layout.setContentsMargins(6, 4, 8, 4)
    legend.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)  # its own size, never stretched
    return legend


def _side_legend(plot, ink, paper):
    """A legend in a column of its own right of the plot's data area (the plot's layout makes room for it), so
    it covers no point at any size."""
    from PySide6.QtCore import Qt

    legend = legend_item(ink, paper)
    plot.layout.addItem(legend, 2, 3)  # the data area's row, past the (hidden) right axis
    plot.layout.setAlignment(legend, Qt.AlignmentFlag.AlignTop)
    plot.layout.setColumnSpacing(2, 8)
    return legend


def draw_frontier(plot, data: dict, ink="k", label_points: int = 8, paper="w", legend=None) -> list:
    """Draw the sweep `data` into the pyqtgraph PlotItem `plot` (axes, points, frontiers, defaults, legend).

    `ink` colours the outlines, the strict-greedy cross and the legend's text and frame, `paper` the legend's and
    the labels' background (colours pyqtgraph accepts); `label_points` is the font size of the B/g/M labels on the
    frontier points (in the application's font). The legend is `legend` (a `legend_item` the caller shows
    elsewhere, beside the plot), else the plot's, else a new one right of the data area: never over the points.
    Returns the default points (dicts of `data`), for a caller that marks them further."""
    import pyqtgraph as pg
    from PySide6.QtGui import QColor, QFont

    plot.setLabel("bottom", "tokens/s relative to strict greedy")
    plot.setLabel("left", "Δ log p per token (nats)")
    for axis in ("left", "bottom"):
        plot.getAxis(axis).enableAutoSIPrefix(False)
    plot.getViewBox().setDefaultPadding(0.08)
    plot.showGrid(x=True, y=True, alpha=0.25)
    if legend is None:
        legend = plot.legend or _side_legend(plot, ink, paper)
    plot.legend = legend  # PlotItem.addItem(..., name=...) and removeItem keep it up to date
    font = QFont()  # the application's font, as the rest of the window
    font.setPointSize(label_points)
    label_fill = QColor(pg.mkColor(paper))
    label_fill.setAlpha(200)  # lines under a label show faintly, never through its text
    points = data["points"]
    labelled = _Labels(points)
    all_defaults = []
    for drafter in dict.fromkeys(p["drafter"] for p in points):
        colour = COLOURS.get(drafter, OTHER)
        mine = [p for p in points if p["drafter"] == drafter and p["log_prob_delta"] is not None]
        plot.addItem(pg.ScatterPlotItem([p["relative_tokens_per_s"] for p in mine],
                                        [p["log_prob_delta"] for p in mine], size=6, pen=None,
                                        brush=pg.mkBrush(*colour, 70)))
        front = sorted((p for p in mine if p["frontier"]), key=lambda p: p["relative_tokens_per_s"])
        line = [(p["relative_tokens_per_s"], p["log_prob_delta"]) for p in front]
        if not any(x >= 1.0 and y >= 0.0 for x, y in line):  # strict greedy itself is on the frontier
            line = sorted([(1.0, 0.0), *line])
        plot.plot([x for x, _ in line], [y for _, y in line], pen=pg.mkPen(colour, width=2), symbol="o",
                  symbolSize=8, symbolBrush=pg.mkBrush(*colour), symbolPen=None, name=f"{drafter} frontier")
        for p in filter(labelled.claim, front):
            label = pg.TextItem(f"B={p['budget_text']} g={p['gate']:g} M={p['cap']}", color=colour,
                                anchor=labelled.anchor(p), fill=pg.mkBrush(label_fill))
            label.textItem.document().setDocumentMargin(1)  # the fill hugs the text: it hides little of a line
            label.setFont(font)
            label.setPos(p["relative_tokens_per_s"], p["log_prob_delta"])
            label.setZValue(Z_LABELS)
            plot.addItem(label)
        defaults = [p for p in mine if p["is_default"]]
        all_defaults += defaults
        if defaults:
            stars = pg.ScatterPlotItem([p["relative_tokens_per_s"] for p in defaults],
                                       [p["log_prob_delta"] for p in defaults], symbol="star", size=18,
                                       pen=pg.mkPen(ink), brush=pg.mkBrush(*colour))
            stars.setZValue(Z_MARKS)
            plot.addItem(stars)
    greedy = pg.ScatterPlotItem([1.0], [0.0], symbol="x", size=16, pen=pg.mkPen(ink, width=2), brush=pg.mkBrush(ink))
    greedy.setZValue(Z_MARKS)
    plot.addItem(greedy)
    legend.addItem(greedy, "strict greedy (1, 0)")
    star = pg.ScatterPlotItem([], [], symbol="star", size=14, pen=pg.mkPen(ink), brush=pg.mkBrush(paper))
    legend.addItem(star, "defaults B=8 g=0.25 M=2")
    return all_defaults


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m app.asd_plot SWEEP.json OUT.png", file=sys.stderr)
        return 2
    save_frontier_png(json.loads(Path(args[0]).read_text()), args[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
