"""A `Theme` applied to pyqtgraph plots: background, title, axes, ticks and legends in the theme's text colour
and sizes, so every piece of chart text has the theme's contrast against the chart's background.

Also what every chart shares: integer-only ticks for counts, and the text colour a test reads back from a plot
(`text_colours`), which is what was applied, not what was meant.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor, QFont

from app.widgets.theme import Theme


def font_px(px: int, bold: bool = False) -> QFont:
    font = QFont()
    font.setPixelSize(max(1, px))
    font.setBold(bold)
    return font


def style_view(view: pg.GraphicsLayoutWidget, theme: Theme) -> None:
    """The chart area's background: the colour the text's contrast is measured against."""
    view.setBackground(theme.background)


def style_plot(plot: pg.PlotItem, theme: Theme, title: str | None = None) -> None:
    """Title, axes (line, tick text, label) and the plot's own legend in the theme's text colour and sizes."""
    if title is not None:
        plot.setTitle(title, color=theme.text, size=f"{theme.title_px}px")
    elif plot.titleLabel.text:
        plot.setTitle(plot.titleLabel.text, color=theme.text, size=f"{theme.title_px}px")
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        axis.setPen(pg.mkPen(theme.text, width=1))
        axis.setTextPen(pg.mkPen(theme.text))
        axis.setStyle(tickFont=font_px(theme.chart_px))
        style = {"color": theme.text, "font-size": f"{theme.chart_px}px"}
        if axis.labelText:
            axis.setLabel(axis.labelText, units=axis.labelUnits or None, **style)
        else:
            axis.labelStyle = style
    plot.showGrid(x=True, y=True, alpha=theme.grid_alpha)
    if plot.legend is not None:
        style_legend(plot.legend, theme)


def style_legend(legend: pg.LegendItem, theme: Theme) -> None:
    legend.setLabelTextColor(theme.text)
    legend.setLabelTextSize(f"{theme.chart_px}px")
    for _sample, label in legend.items:  # entries added before: restyled here
        label.setText(label.text, color=theme.text, size=f"{theme.chart_px}px")
    legend.setBrush(pg.mkBrush(QColor(theme.background)))
    legend.setPen(pg.mkPen(theme.text, width=1))


def style_text_item(item: pg.TextItem, theme: Theme) -> None:
    """A label drawn in the plot (annotations, notes)."""
    item.setColor(theme.text)
    item.setFont(font_px(theme.chart_px))


class IntegerAxis(pg.AxisItem):
    """An axis of counts (draft positions, K): ticks only at whole numbers."""

    def tickValues(self, minVal, maxVal, size):  # pyqtgraph's names
        ticks = super().tickValues(minVal, maxVal, size)
        whole = []
        for spacing, values in ticks:
            if spacing < 1:
                continue
            whole.append((spacing, [v for v in values if float(v).is_integer()]))
        if not whole:
            whole = [(1.0, [float(v) for v in range(int(minVal) + (minVal > int(minVal)), int(maxVal) + 1)])]
        return whole


def text_colours(plot: pg.PlotItem) -> dict[str, str]:
    """The colour of each piece of a plot's text as drawn now ('#rrggbb'): title, each axis's tick text and
    label, and the plot's own legend (for the contrast test)."""
    colours = {}
    if plot.titleLabel.text:
        colours["title"] = QColor(plot.titleLabel.opts.get("color") or "#969696").name()
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        if not axis.isVisible():
            continue
        colours[f"{name} ticks"] = axis.textPen().color().name()
        colours[f"{name} label"] = QColor(axis.labelStyle.get("color", axis.textPen().color())).name()
    own_legend = getattr(plot, "legend_label", None)  # a legend drawn as text under the plot
    if own_legend is not None:
        colours["legend"] = QColor(own_legend.opts.get("color") or "#969696").name()
    if plot.legend is not None:
        for _sample, label in plot.legend.items:
            colours[f"legend {label.text}"] = QColor(label.opts.get("color") or "#969696").name()
    return colours


def background_colour(view: pg.GraphicsLayoutWidget) -> str:
    return view.backgroundBrush().color().name()
