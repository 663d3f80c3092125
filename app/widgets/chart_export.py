"""Figures for slides: any chart (one plot with its legend, or all of them) or any widget (the inspector) saved
as PNG at twice the screen's pixels, or as SVG; the token stream as HTML. Offered from context menus.

PNG: the item or widget drawn into an image of EXPORT_SCALE times its size (text and lines scaled with it, so
the figure stays sharp on a projector). SVG: drawn through QSvgGenerator.
"""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QPoint, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QImage, QPainter
from PySide6.QtSvg import QSvgGenerator
from PySide6.QtWidgets import QFileDialog, QGraphicsItem, QMenu, QPlainTextEdit, QTextEdit, QWidget

EXPORT_SCALE = 2  # PNG pixels per screen pixel


class ExportError(Exception):
    """A figure could not be written; the message says where and what to do."""


def save_item_png(item: QGraphicsItem, path: str | Path, scale: int = EXPORT_SCALE) -> QSize:
    """A chart (a plot, a plot with its legend, or a whole scene's layout) as PNG at `scale` times its size."""
    rect = _extent(item)
    size = QSize(max(1, round(rect.width() * scale)), max(1, round(rect.height() * scale)))
    image = QImage(size, QImage.Format.Format_ARGB32)
    image.fill(_background_of(item))
    painter = QPainter(image)
    painter.setRenderHints(QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing)
    item.scene().render(painter, QRectF(0, 0, size.width(), size.height()), rect,
                        Qt.AspectRatioMode.IgnoreAspectRatio)
    painter.end()
    _write(image, path)
    return size


def save_item_svg(item: QGraphicsItem, path: str | Path) -> None:
    """A chart as SVG (vector: lines and text stay sharp at any size). Drawn through QSvgGenerator: pyqtgraph's
    own SVG exporter cannot read the paths Qt 6 writes."""
    rect = _extent(item)
    generator = _svg(path, QSize(round(rect.width()), round(rect.height())), "chart")
    painter = _begin(generator, path)
    painter.fillRect(QRectF(0, 0, rect.width(), rect.height()), _background_of(item))
    item.scene().render(painter, QRectF(0, 0, rect.width(), rect.height()), rect)
    painter.end()


def save_widget_png(widget: QWidget, path: str | Path, scale: int = EXPORT_SCALE) -> QSize:
    """A widget (the inspector, the stream) as PNG at `scale` times its size."""
    size = widget.size() * scale
    image = QImage(size, QImage.Format.Format_ARGB32)
    image.setDevicePixelRatio(scale)
    image.fill(widget.palette().window().color())
    widget.render(image)
    _write(image, path)
    return size


def save_widget_svg(widget: QWidget, path: str | Path) -> None:
    """A widget (the inspector) as SVG."""
    generator = _svg(path, widget.size(), widget.windowTitle() or widget.objectName() or "figure")
    painter = _begin(generator, path)
    widget.render(painter, QPoint())
    painter.end()


def _svg(path: str | Path, size: QSize, title: str) -> QSvgGenerator:
    generator = QSvgGenerator()
    generator.setFileName(str(path))
    generator.setSize(size)
    generator.setViewBox(QRect(QPoint(), size))
    generator.setTitle(title)
    return generator


def _begin(generator: QSvgGenerator, path: str | Path) -> QPainter:
    painter = QPainter()
    if not painter.begin(generator):
        raise ExportError(f"Could not write {path}. Choose a folder you can write to.")
    return painter


def save_html(html: str, path: str | Path) -> None:
    try:
        Path(path).write_text(html, encoding="utf-8")
    except OSError as error:
        raise ExportError(f"Could not write {path}: {error}. Choose a folder you can write to.") from error


def _write(image: QImage, path: str | Path) -> None:
    if not image.save(str(path), "PNG"):  # type: ignore[call-overload]  # the stubs ask bytes; PySide6 takes str
        raise ExportError(f"Could not write {path}. Choose a folder you can write to.")


def _extent(item: QGraphicsItem) -> QRectF:
    """The item and everything drawn by its children (a legend's last line may reach past the cell)."""
    return item.sceneBoundingRect().united(item.mapRectToScene(item.childrenBoundingRect()))


def _background_of(item: QGraphicsItem):
    views = item.scene().views()
    return views[0].backgroundBrush().color() if views else Qt.GlobalColor.white


# --- context menus ------------------------------------------------------------------------------

def _ask_path(parent: QWidget, name: str, suffix: str) -> str | None:
    filters = {"png": "PNG image (*.png)", "svg": "SVG drawing (*.svg)", "html": "Web page (*.html)"}
    path, _filter = QFileDialog.getSaveFileName(parent, "Save figure", f"{name}.{suffix}", filters[suffix])
    if not path:
        return None
    return path if path.lower().endswith(f".{suffix}") else f"{path}.{suffix}"


def _saving(parent: QWidget, name: str, suffix: str, save) -> None:
    path = _ask_path(parent, name, suffix)
    if path is None:
        return
    try:
        save(path)
    except ExportError as error:
        _tell(parent, str(error))


def _tell(parent: QWidget, message: str) -> None:
    window = parent.window()
    bar = getattr(window, "statusBar", None)
    if callable(bar):
        bar().showMessage(message, 10000)


def chart_actions(menu: QMenu, view: pg.GraphicsView, item: QGraphicsItem, name: str) -> None:
    """Save `item` (one chart) or everything in `view` as PNG (2×) or SVG."""
    whole = _whole(view)
    menu.addAction(f"Save this chart as PNG ({EXPORT_SCALE}×)…",
                   lambda: _saving(view, name, "png", lambda path: save_item_png(item, path)))
    menu.addAction("Save this chart as SVG…",
                   lambda: _saving(view, name, "svg", lambda path: save_item_svg(item, path)))
    if whole is not item:
        menu.addAction(f"Save all these charts as PNG ({EXPORT_SCALE}×)…",
                       lambda: _saving(view, "charts", "png", lambda path: save_item_png(whole, path)))


def install_export_menu(view: pg.GraphicsView, name: str) -> None:
    """Add the save actions to the right-click menu of every plot in `view` (a GraphicsLayoutWidget or a
    PlotWidget)."""
    for plot in _plots_in(_whole(view)):
        menu = plot.getViewBox().menu
        if getattr(menu, "export_actions_added", False):
            continue
        menu.addSeparator()
        cell = plot.parentItem() if isinstance(plot.parentItem(), pg.GraphicsLayout) else plot
        chart_actions(menu, view, cell if cell is not _whole(view) else plot, _file_name(plot.titleLabel.text or name))
        menu.export_actions_added = True


def _whole(view: pg.GraphicsView) -> QGraphicsItem:
    return view.ci if isinstance(view, pg.GraphicsLayoutWidget) else view.getPlotItem()


def _plots_in(item) -> list[pg.PlotItem]:
    if isinstance(item, pg.PlotItem):
        return [item]
    if isinstance(item, pg.GraphicsLayout):
        return [plot for child in item.items for plot in _plots_in(child)]
    return []


def _file_name(title: str) -> str:
    words = "".join(ch if ch.isalnum() else " " for ch in title).split()
    return "-".join(words[:4]).lower() or "chart"


def install_widget_export_menu(widget: QWidget, name: str) -> None:
    """A right-click menu on `widget` (the inspector) that saves it as PNG (2×) or SVG."""
    widget.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)

    def show_menu(position) -> None:
        menu = QMenu(widget)
        menu.addAction(f"Save as PNG ({EXPORT_SCALE}×)…",
                       lambda: _saving(widget, name, "png", lambda path: save_widget_png(widget, path)))
        menu.addAction("Save as SVG…", lambda: _saving(widget, name, "svg", lambda path: save_widget_svg(widget, path)))
        menu.exec(widget.mapToGlobal(position))

    widget.customContextMenuRequested.connect(show_menu)


def install_html_export(view: QPlainTextEdit | QTextEdit, name: str) -> None:
    """The text view's own right-click menu (copy, select all) plus: save it as HTML (its document, with every
    token's colour and style) or as a PNG (2×) picture."""
    view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)

    def show_menu(position) -> None:
        menu = view.createStandardContextMenu(position)
        menu.addSeparator()
        menu.addAction("Save the text as HTML…",
                       lambda: _saving(view, name, "html", lambda path: save_html(view.document().toHtml(), path)))
        menu.addAction(f"Save the text as PNG ({EXPORT_SCALE}×)…",
                       lambda: _saving(view, name, "png", lambda path: save_widget_png(view, path)))
        menu.exec(view.mapToGlobal(position))

    view.customContextMenuRequested.connect(show_menu)
