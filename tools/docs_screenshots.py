#!/usr/bin/env python3
"""Render the pictures in docs/ from real runs of the bundled models, at the two window sizes the project
checks (1600x1000 and 1024x700): the main window after a fallback-chain run (the README shows the
1600x1000 one), the pass inspector at a sampled rejection and at a token-tree pass, and the theory explorer after a
draft-model run.

    python tools/docs_screenshots.py            # writes into docs/
    python tools/docs_screenshots.py --out DIR  # anywhere else, e.g. to compare before committing
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

SIZES = ((1600, 1000), (1024, 700))
DOCS = Path(__file__).resolve().parent.parent / "docs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DOCS, help="output folder (default: docs/)")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from app.engine.engine import LocalEngine
    from app.launch import qt_application
    from app.settings_store import DEFAULT_REQUEST

    app = qt_application()
    engine = LocalEngine.load(DEFAULT_REQUEST)
    args.out.mkdir(parents=True, exist_ok=True)
    for width, height in SIZES:
        for name, show in (("window", show_window), ("inspector", show_inspector), ("tree", show_tree),
                           ("theory", show_theory)):
            path = args.out / f"{name}-{width}x{height}.png"
            render(app, engine, (width, height), show, path)
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
        window.grab().save(str(path))
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


def settle(app, ms: int = 300) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()
    app.processEvents()


if __name__ == "__main__":
    raise SystemExit(main())
