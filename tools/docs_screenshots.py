#!/usr/bin/env python3
"""Render the pictures in docs/ from real runs of the bundled models, at the two window sizes the project
checks (1600x1000 and 1024x700): the main window after a fallback-chain run (the README shows the
1600x1000 one), the pass inspector at a sampled rejection and at a token-tree pass, and the theory explorer after a
draft-model run. For the classroom: the window in normal and in presentation mode at the four projector sizes
(1024x768, 1366x768, 1600x1000, 1920x1080), in the Classroom layout at the same sizes, and every step of the
guided lesson at 1600x1000.

    python tools/docs_screenshots.py            # writes into docs/
    python tools/docs_screenshots.py --out DIR  # anywhere else, e.g. to compare before committing
    python -m tools.docs_screenshots --only classroom --match classroom-  # only some of them
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

SIZES = ((1600, 1000), (1024, 700))
CLASSROOM_SIZES = ((1024, 768), (1366, 768), (1600, 1000), (1920, 1080))
LESSON_SIZE = (1600, 1000)
DOCS = Path(__file__).resolve().parent.parent / "docs"
CLASSROOM = DOCS / "classroom"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DOCS, help="output folder (default: docs/)")
    parser.add_argument("--only", choices=("all", "views", "classroom", "lesson"), default="all",
                        help="render only some of the pictures")
    parser.add_argument("--match", default="", help="render only the pictures whose file name contains this")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from app.engine.engine import LocalEngine
    from app.launch import qt_application
    from app.settings_store import DEFAULT_REQUEST

    app = qt_application()
    engine = LocalEngine.load(DEFAULT_REQUEST)
    args.out.mkdir(parents=True, exist_ok=True)
    classroom = args.out / CLASSROOM.name
    classroom.mkdir(exist_ok=True)
    jobs = []
    if args.only in ("all", "views"):
        jobs += [(args.out / f"{name}-{w}x{h}.png", (w, h), show) for w, h in SIZES
                 for name, show in (("window", show_window), ("inspector", show_inspector), ("tree", show_tree),
                                    ("theory", show_theory))]
    if args.only in ("all", "classroom"):
        jobs += [(classroom / f"{name}-{w}x{h}.png", (w, h), show) for w, h in CLASSROOM_SIZES
                 for name, show in (("normal", show_normal), ("presentation", show_presentation),
                                    ("classroom", show_classroom))]
        jobs.append((classroom / "presentation-rows-1600x1000.png", (1600, 1000), show_pass_rows))
    if args.only in ("all", "lesson"):
        from app.teaching.lesson import STEPS

        jobs += [(classroom / f"lesson-{i + 1:02d}-{step.key}.png", LESSON_SIZE,
                  lambda app, window, i=i: show_lesson_step(app, window, i)) for i, step in enumerate(STEPS)]
    for path, size, show in jobs:
        if args.match not in path.name:
            continue
        render(app, engine, size, show, path)
        print(path)
    return 0


def render(app, engine, size: tuple[int, int], show, path: Path) -> None:
    from PySide6.QtCore import QSettings

    from app.launch import HistoryOutOfCollector
    from app.main_window import MainWindow
    from app.settings_store import DEFAULT_REQUEST

    with tempfile.TemporaryDirectory() as scratch:
        store = QSettings(str(Path(scratch) / "docs.ini"), QSettings.Format.IniFormat)  # never the user's
        store.setValue("guide/seen", True)
        window = MainWindow(settings=store, engine_process=False)
        HistoryOutOfCollector(window.session)
        window.resize(*size)
        window.show()
        window.set_engine(engine, DEFAULT_REQUEST)
        show(app, window)
        settle(app)
        save_small(window.grab().toImage(), path)
        window.set_presentation(False)  # the chart theme is the application's: the next picture starts normal
        window.set_classroom(False)  # so is the charts' text scale
        window.shutdown()
        window.close()
        window.deleteLater()


def ready_prompt(window, predicate, max_new_tokens: int) -> None:
    from app.widgets.guide import READY_PROMPTS

    window.use_ready_prompt(next(r for r in READY_PROMPTS if predicate(r)))
    window.controls.max_tokens.setValue(max_new_tokens)


def show_window(app, window) -> None:
    from app.launch import run_to_end

    ready_prompt(window, lambda r: "draft-model" in r.drafters[1:], 120)  # the fallback chain
    run_to_end(app, window)


def show_inspector(app, window) -> None:
    from app.launch import run_to_end

    ready_prompt(window, lambda r: r.verify == "sample", 60)
    run_to_end(app, window)
    rows = [i for i, e in enumerate(window.session.passes) if e.appended is not None and e.appended.kind == "resampled"
            and e.detail is not None and e.detail.residual]
    window.token_view.select_pass(rows[0])  # a sampled rejection: the residual chart is drawn


def show_tree(app, window) -> None:
    from app.launch import run_to_end
    from app.widgets.tree_view import branch_count

    ready_prompt(window, lambda r: r.drafters == ("draft-model",) and r.verify == "greedy", 60)
    window.drafters.tree.setChecked(True)  # the default budget: 16 nodes, K levels deep
    run_to_end(app, window)
    passes = window.session.passes
    rows = [i for i, e in enumerate(passes) if e.tree]
    # the longest accepted path, then the most branches: a tree that shows what it bought
    window.token_view.select_pass(max(rows, key=lambda i: (len(passes[i].path or ()), branch_count(passes[i].tree))))


def show_theory(app, window) -> None:
    from app.launch import run_to_end

    ready_prompt(window, lambda r: r.drafters == ("draft-model",) and r.verify == "greedy", 128)
    run_to_end(app, window)
    window.theory_dock.show()
    window.theory_dock.raise_()
    settle(app)
    window.theory.refresh()


def show_normal(app, window) -> None:
    """The normal layout after a draft-model run, one pass selected."""
    from app.launch import run_to_end

    ready_prompt(window, lambda r: r.drafters == ("draft-model",) and r.verify == "greedy", 96)
    run_to_end(app, window)
    window.token_view.select_pass(len(window.session.passes) // 2)
    window.charts_dock.raise_()  # every chart in view
    window.charts.refresh()


def show_classroom(app, window) -> None:
    """The Classroom layout (large fonts) after the same run as `show_normal`."""
    window.classroom_action.setChecked(True)
    settle(app)
    show_normal(app, window)


def show_presentation(app, window) -> None:
    """Presentation mode after a run whose drafter changed midway (the change marker), the α chart beside."""
    from app.launch import run_to_end

    ready_prompt(window, lambda r: r.drafters == ("draft-model",) and r.verify == "greedy", 96)
    window.presentation_action.setChecked(True)
    window.presentation.show_view(1)
    run_to_end(app, window)
    window.presentation.charts.refresh()
    window.move_pass(0)


def show_pass_rows(app, window) -> None:
    """Presentation mode, one pass per line (Leviathan et al.'s Figure 1), beside tokens per pass."""
    window.set_pass_rows(True)
    show_presentation(app, window)
    window.presentation.show_view(2)
    window.presentation.charts.refresh()


def show_lesson_step(app, window, index: int) -> None:
    """The lesson with step `index` run (the steps before it too: a later step compares with their runs)."""
    from PySide6.QtCore import QEventLoop

    window.show_lesson()
    for step in range(index + 1):
        window.lesson.select(step)
        loop = QEventLoop()
        window.sig_run_finished.connect(loop.quit)
        if window.run_lesson_step(window.lesson.step) and window.is_generating:
            loop.exec()
        window.sig_run_finished.disconnect(loop.quit)
        settle(app, 100)
    window.charts.refresh()
    window.theory.refresh()


def save_small(image, path: Path) -> None:
    """A PNG of the picture's own 256 most frequent colours, without dithering: a fraction of the size, the
    text as sharp, the token colours exact (anti-aliased edges take the nearest of them)."""
    import numpy as np
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QImage

    rgb = image.convertToFormat(QImage.Format.Format_RGB32)
    pixels = np.frombuffer(rgb.constBits(), np.uint32, rgb.width() * rgb.height())
    colours, counts = np.unique(pixels, return_counts=True)
    table = [int(c) for c in colours[np.argsort(counts)[::-1][:256]]]
    flags = Qt.ImageConversionFlag.ThresholdDither | Qt.ImageConversionFlag.AvoidDither
    rgb.convertToFormat(QImage.Format.Format_Indexed8, table, flags).save(str(path), "PNG", 0)


def settle(app, ms: int = 300) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()
    app.processEvents()


if __name__ == "__main__":
    raise SystemExit(main())
