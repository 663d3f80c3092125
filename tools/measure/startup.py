"""Measure how fast the window starts and quits, as a user launching `python main.py` sees it.

    python -m tools.measure.startup              # 5 cold starts, offscreen, with fresh settings
    python -m tools.measure.startup --runs 3 --no-quit

Each run starts a fresh interpreter that opens the window exactly as `python main.py` does (offscreen, with
a settings folder of its own, so the bundled demo family loads) and prints three times, measured from the
moment the process was started: the window shown, the models ready (the window holds an engine), and,
after the window is closed as by File → Quit (Ctrl+Q), how long the process took to exit. Medians are
printed last, with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Runs in the measured process: marks the moments of interest on stdout, then starts the app as main.py does.
CHILD = r"""
import importlib.machinery, sys, time

def mark(name):
    print(f"MARK {name} {time.time():.6f}", flush=True)

def patch(main_window):
    from PySide6.QtCore import QTimer

    shown_once = []
    original_show_event, original_set_engine = main_window.MainWindow.showEvent, main_window.MainWindow.set_engine

    def show_event(self, event):
        original_show_event(self, event)
        if not shown_once:
            shown_once.append(True)
            QTimer.singleShot(0, lambda: mark("window"))  # once the event loop runs: the window is on screen

    def set_engine(self, engine, request=None):
        original_set_engine(self, engine, request)
        mark("ready")
        if QUIT:
            QTimer.singleShot(0, lambda: (mark("quit"), self.close()))  # what File → Quit (Ctrl+Q) does

    main_window.MainWindow.showEvent, main_window.MainWindow.set_engine = show_event, set_engine

class PatchWhereImported:
    # The window is patched when the app itself imports it: imported here first, Qt's and the window's imports
    # would come before whatever the app starts ahead of them (the engine process).
    def find_spec(self, name, path=None, target=None):
        if name != "app.main_window":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run_module = spec.loader.exec_module
        spec.loader.exec_module = lambda module: (run_module(module), patch(module))
        return spec

sys.meta_path.insert(0, PatchWhereImported())
QUIT = sys.argv[1] == "quit"
sys.argv = ["main.py"]
from app.cli import main
sys.exit(main([]))
"""


def measure_once(quit_after: bool, timeout_s: float = 300.0) -> dict[str, float]:
    """One cold start: seconds from process start to window and to ready, and from quit to process exit."""
    with tempfile.TemporaryDirectory() as config:
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=config, HOME=config,
                   HF_HUB_OFFLINE="1")
        started = time.time()
        child = subprocess.Popen([sys.executable, "-c", CHILD, "quit" if quit_after else "stay"], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        marks: dict[str, float] = {}
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("MARK "):
                _, name, stamp = line.split()
                marks[name] = float(stamp)
            if "ready" in marks and not quit_after:
                child.terminate()
                break
        child.wait(timeout_s)
        ended = time.time()
    figures = {name: stamp - started for name, stamp in marks.items() if name in ("window", "ready")}
    if quit_after and "quit" in marks:
        figures["exit"] = ended - marks["quit"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="cold starts to measure (default 5)")
    parser.add_argument("--no-quit", action="store_true", help="do not measure the exit (the process is ended)")
    args = parser.parse_args(argv)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}  cores: {os.cpu_count()}")
    runs = []
    for index in range(args.runs):
        figures = measure_once(not args.no_quit)
        runs.append(figures)
        print(f"run {index + 1}: " + "  ".join(f"{name} {value:.2f} s" for name, value in figures.items()), flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name in ("window", "ready", "exit"):
        values = [run[name] for run in runs if name in run]
        if values:
            print(f"median {name}: {statistics.median(values):.2f} s  (min {min(values):.2f}, max {max(values):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
