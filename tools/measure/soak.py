"""Long runs in the playground window: memory, event-loop stalls, throughput. Prints figures, decides nothing.

    python -m tools.measure.soak long --tokens 10000       one long generation with live charts: RSS growth, stalls
    python -m tools.measure.soak repeat --runs 100         consecutive generations in one window: threads, objects, RSS
    python -m tools.measure.soak overhead --tokens 5000    engine tokens/s with the window vs headless; longest stall
    python -m tools.measure.soak all                       the three above at these sizes

By default the models are a tiny random llama pair with a 16k context whose EOS is muted (so every run
reaches max new tokens), built in a temporary folder; --target / --draft use real ones instead. The
window runs offscreen unless --visible. A stall is the longest gap between two ticks of a 5 ms QTimer
on the GUI thread: how long the window could not react to anything. tests/test_soak.py runs the same
functions at small sizes.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from tools.options import add_threads

ROOT = Path(__file__).resolve().parents[2]

PROMPT = "def add(a, b):\n    return a + b\n\ndef"
DRAFTERS = ("prompt-lookup", "draft-model")
HEARTBEAT_MS = 5
WARM_UP_TOKENS = 64
LONG_CONTEXT = 16_384


# --- measuring ---------------------------------------------------------------------------------------------
def rss_mb() -> float:
    """Resident memory of this process now (Linux /proc; peak RSS elsewhere)."""
    try:
        resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def tracked_objects() -> int:
    """Objects the cyclic collector tracks, those the window froze out of its reach included."""
    return len(gc.get_objects()) + gc.get_freeze_count()


class Heartbeat:
    """A fast QTimer on the GUI thread; the gaps between its ticks are the event loop's stalls.

    It also times this process's garbage collections while it runs: a full collection walks every
    Python object alive and is the longest pause a Python GUI can have.
    """

    def __init__(self, interval_ms: int = HEARTBEAT_MS) -> None:
        from PySide6.QtCore import Qt, QTimer

        self._timer = QTimer()
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._tick)
        self.gaps_ms: list[float] = []
        self._last = 0.0

    def start(self) -> None:
        self.gaps_ms.clear()
        self.collections: list[tuple[int, float]] = []  # (generation, ms)
        self._last = time.perf_counter()
        gc.callbacks.append(self._on_collection)
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
        gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._collection_started = time.perf_counter()
        else:
            self.collections.append((info["generation"], 1e3 * (time.perf_counter() - self._collection_started)))

    def _tick(self) -> None:
        now = time.perf_counter()
        self.gaps_ms.append(1e3 * (now - self._last))
        self._last = now

    def summary(self) -> dict:
        gaps = sorted(self.gaps_ms) or [0.0]
        full = [ms for generation, ms in self.collections if generation == 2]
        return {"max_stall_ms": round(gaps[-1], 1), "p99_gap_ms": round(gaps[int(0.99 * (len(gaps) - 1))], 1),
                "stalls_over_50ms": sum(g > 50 for g in gaps), "ticks": len(self.gaps_ms),
                "full_gc": len(full), "longest_gc_ms": round(max((ms for _, ms in self.collections), default=0.0), 1)}


# --- models and window -------------------------------------------------------------------------------------
def model_request(target: str | None, draft: str | None, scratch: Path) -> dict:
    """The given models, else a tiny long-context pair that never stops early."""
    if target is not None:
        return dict(target=target, draft=draft, device="auto", dtype="auto")
    from tests.tiny_models import tiny_pair  # the test suite's model builder: random weights, no download

    target, draft = map(str, tiny_pair(scratch / "models", "llama", context=LONG_CONTEXT, mute_eos=True))
    return dict(target=target, draft=draft, device="cpu", dtype="float32")


def load(request: dict):
    """(models, decoder) in this process: the headless runs, and the window's with --engine thread."""
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models

    models = load_models(**request)
    return models, SpeculativeDecoder(models)


def start_engine_process(request: dict, threads: int):
    """The window's own set-up: the models in an engine process (app/engine/remote.py)."""
    from app.engine.remote import EngineProcess

    return EngineProcess(request, threads=threads)


def window_engine(request: dict, models, decoder, kind: str, threads: int):
    """The engine the window talks to: the headless models in this process (--engine thread), or an
    engine process."""
    from app.engine.engine import LocalEngine

    return LocalEngine(models, decoder) if kind == "thread" else start_engine_process(request, threads)


def settings_for(models, tokens: int):
    from app.engine.settings import DecodeSettings

    chain = tuple(name for name in DRAFTERS if name in models.available_drafters)
    return DecodeSettings(drafters=chain, k=4, verify="greedy", max_new_tokens=tokens)


def open_window(engine, scratch: Path):
    from PySide6.QtCore import QSettings

    from app.launch import HistoryOutOfCollector, qt_application
    from app.main_window import MainWindow

    app = qt_application()
    store = QSettings(str(scratch / "soak.ini"), QSettings.Format.IniFormat)  # never the user's settings
    store.setValue("guide/seen", True)
    window = MainWindow(settings=store)
    HistoryOutOfCollector(window.session)
    window.resize(1500, 950)
    window.show()
    window.set_engine(engine)
    window.charts_dock.raise_()  # charts skip redraws while hidden: keep them on screen
    app.processEvents()
    return app, window


def generate_in_window(window, settings, prompt: str = PROMPT, bar=None):
    """One generation through the window's own controls; returns the session's EndEvent. `bar` (tqdm)
    follows its tokens four times a second."""
    from PySide6.QtCore import QEventLoop, QTimer

    window.controls.prompt.setPlainText(prompt)
    window.drafters.apply(settings)
    window.controls.max_tokens.setValue(settings.max_new_tokens)
    window.controls.seed.setValue(settings.seed)
    loop = QEventLoop()
    window.sig_run_finished.connect(loop.quit)
    ticker = None
    if bar is not None and not bar.disable:
        ticker = QTimer()
        ticker.setInterval(250)
        ticker.timeout.connect(lambda start=bar.n: bar.update(max(0, start + window.session.token_count - bar.n)))
        ticker.start()
    started_at = bar.n if bar is not None else 0
    try:
        if not window.start_generation(paused=False):
            raise RuntimeError(f"the window did not start: {window.banner.text()}")
        loop.exec()
    finally:
        window.sig_run_finished.disconnect(loop.quit)
        if ticker is not None:
            ticker.stop()
    end = window.session.end
    if bar is not None:
        bar.update(max(0, started_at + len(end.token_ids) - bar.n))
    return end


def generate_headless(decoder, settings, prompt: str = PROMPT, bar=None):
    from app.engine.events import EndEvent, PassEvent

    end, started_at = None, bar.n if bar is not None else 0
    for event in decoder.generate(prompt, settings):
        if bar is not None and isinstance(event, PassEvent):
            bar.update(max(0, started_at + event.position - bar.n))
        end = event
    assert isinstance(end, EndEvent)
    if bar is not None:
        bar.update(max(0, started_at + len(end.token_ids) - bar.n))
    return end


def planned_tokens(check: str, tokens: int | None, runs: int, run_tokens: int, repeats: int) -> int:
    """Tokens the checks will generate, warm-ups included (every run reaches max new tokens with the tiny pair)."""
    planned = 0
    if check in ("long", "all"):
        planned += WARM_UP_TOKENS + (tokens or 10_000)
    if check in ("repeat", "all"):
        planned += runs * run_tokens
    if check in ("overhead", "all"):
        planned += WARM_UP_TOKENS + 2 * repeats * (tokens or 5_000)
    return planned


def progress_bar(total: int, shown: bool | None = None):
    """A tqdm bar over the soak's tokens with the time left, on stderr; `shown` None: only on a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, unit="tok", desc="soak", file=sys.stderr, dynamic_ncols=True,
                disable=None if shown is None else not shown)


def tokens_per_s(end) -> float:
    """Engine throughput of one run: tokens over the engine's own elapsed time."""
    return len(end.token_ids) / end.elapsed_s if end.elapsed_s > 0 else 0.0


def settle(app, ms: int = 100) -> None:
    deadline = time.perf_counter() + ms / 1000
    while time.perf_counter() < deadline:
        app.processEvents()
        time.sleep(0.005)


# --- the checks --------------------------------------------------------------------------------------------
def soak_long(app, window, models, tokens: int, bar=None) -> dict:
    """One long generation with live charts: memory growth, stalls, and what a redraw costs at the end."""
    settings = settings_for(models, tokens)
    generate_in_window(window, settings_for(models, WARM_UP_TOKENS), bar=bar)  # first-use allocations are not growth
    gc.collect()
    rss_before = rss_mb()
    beat = Heartbeat()
    beat.start()
    started, gui_cpu = time.perf_counter(), time.thread_time()
    end = generate_in_window(window, settings, bar=bar)
    wall_s, gui_cpu = time.perf_counter() - started, time.thread_time() - gui_cpu
    beat.stop()
    settle(app)
    gc.collect()
    return {
        "tokens": len(end.token_ids), "reason": end.reason, "passes": end.passes, "wall_s": round(wall_s, 2),
        "engine_tokens_per_s": round(tokens_per_s(end), 1),
        # CPU the GUI thread burnt: unlike stalls, barely moved by other processes on a shared machine.
        "gui_thread_cpu_s": round(gui_cpu, 2), "gui_cpu_share_of_wall": round(gui_cpu / wall_s, 3),
        "rss_before_mb": round(rss_before, 1), "rss_after_mb": round(rss_mb(), 1),
        "rss_growth_mb": round(rss_mb() - rss_before, 1),
        "rss_growth_kb_per_1k_tokens": round(1024 * (rss_mb() - rss_before) / max(1, len(end.token_ids)) * 1000, 1),
        **beat.summary(), **redraw_costs(window),
    }


def redraw_costs(window) -> dict:
    """Milliseconds of one full chart redraw (painted), and of 1,000 token lookups in the view, at the run's size."""
    from PySide6.QtWidgets import QApplication

    started = time.perf_counter()
    window.charts.refresh()
    window.charts.layout_widget.viewport().repaint()
    QApplication.processEvents()
    chart_ms = 1e3 * (time.perf_counter() - started)
    view = window.token_view
    length = max(1, view.document().characterCount() - 1)
    started = time.perf_counter()
    for i in range(1000):
        view.token_at(i * length // 1000)
    lookup_ms = 1e3 * (time.perf_counter() - started)
    return {"chart_redraw_ms": round(chart_ms, 1), "view_1000_lookups_ms": round(lookup_ms, 1),
            "view_tokens": view.token_count}


def soak_repeat(app, window, models, runs: int, tokens: int, bar=None) -> dict:
    """Consecutive generations in one window: nothing may pile up between runs."""
    from PySide6.QtCore import QObject

    settings = settings_for(models, tokens)
    samples = []
    for run in range(runs):
        end = generate_in_window(window, settings.with_changes(seed=run), bar=bar)
        if end.reason not in ("max_tokens", "eos"):
            raise RuntimeError(f"run {run} ended with {end.reason}: {end.error}")
        if run in (0, runs // 2, runs - 1):
            settle(app)
            gc.collect()
            samples.append({"run": run + 1, "threads": threading.active_count(), "gc_objects": tracked_objects(),
                            "qobjects": len(window.findChildren(QObject)), "rss_mb": round(rss_mb(), 1),
                            "session_events": len(window.session.events),
                            # a diagnostic; an engine process keeps its drafters to itself
                            "decoder_drafters": len(getattr(getattr(window.engine, "decoder", None), "_drafters", ()))})
    first, last = samples[0], samples[-1]
    return {
        "runs": runs, "tokens_per_run": tokens, "samples": samples,
        "thread_growth": last["threads"] - first["threads"],
        "gc_object_growth": last["gc_objects"] - first["gc_objects"],
        "qobject_growth": last["qobjects"] - first["qobjects"],
        "rss_growth_mb": round(last["rss_mb"] - first["rss_mb"], 1),
    }


def measure_overhead(app, window, models, decoder, tokens: int, repeats: int = 3, bar=None) -> dict:
    """Engine tokens/s in the window (heartbeat running) vs headless, interleaved; the longest stall."""
    settings = settings_for(models, tokens)
    generate_headless(decoder, settings_for(models, WARM_UP_TOKENS), bar=bar)  # warm-up
    headless, windowed, stalls, gui_cpu = [], [], [], []
    for _ in range(repeats):
        headless.append(tokens_per_s(generate_headless(decoder, settings, bar=bar)))
        beat = Heartbeat()
        beat.start()
        cpu = time.thread_time()
        windowed.append(tokens_per_s(generate_in_window(window, settings, bar=bar)))
        gui_cpu.append(round(time.thread_time() - cpu, 2))
        beat.stop()
        stalls.append(beat.summary())
        settle(app)
    best_h, best_w = statistics.median(headless), statistics.median(windowed)
    worst = max(stalls, key=lambda s: s["max_stall_ms"])
    return {
        "tokens": tokens, "repeats": repeats,
        "headless_tokens_per_s": [round(v, 1) for v in headless],
        "window_tokens_per_s": [round(v, 1) for v in windowed],
        "ratio_of_medians": round(best_w / best_h, 3) if best_h else None,
        # Each window run against the headless run just before it: drift of a shared machine cancels out.
        "median_pair_ratio": round(statistics.median(w / h for w, h in zip(windowed, headless, strict=True) if h), 3),
        "max_stall_ms": worst["max_stall_ms"], "p99_gap_ms": worst["p99_gap_ms"],
        "stalls_over_50ms": [s["stalls_over_50ms"] for s in stalls], "gui_thread_cpu_s": gui_cpu,
        "full_gc": [s["full_gc"] for s in stalls], "longest_gc_ms": max(s["longest_gc_ms"] for s in stalls),
    }


# --- command line ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("check", choices=["long", "repeat", "overhead", "all"], nargs="?", default="all")
    parser.add_argument("--tokens", type=int, help="tokens of the long run / the overhead runs (10000 / 5000)")
    parser.add_argument("--runs", type=int, default=100, help="generations of the repeat check")
    parser.add_argument("--run-tokens", type=int, default=64, help="tokens per generation of the repeat check")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved pairs of the overhead check")
    parser.add_argument("--target", help="hub id or folder (default: a tiny random long-context pair)")
    parser.add_argument("--draft", help="draft model for --target")
    add_threads(parser)
    parser.add_argument("--visible", action="store_true", help="show the window instead of rendering offscreen")
    parser.add_argument("--engine", choices=["process", "thread"], default="process",
                        help="the window's engine: its own process (as the app does) or a thread of the window's")
    parser.add_argument("--json", dest="json_path", help="also write the figures here")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction,
                        help="a progress bar over the tokens with the time left, on stderr (default: when stderr "
                             "is a terminal)")
    args = parser.parse_args(argv)
    if not args.visible:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import torch

    torch.set_num_threads(args.threads)
    figures = {"threads": args.threads, "rss_start_mb": round(rss_mb(), 1)}
    with tempfile.TemporaryDirectory() as scratch:
        request = model_request(args.target, args.draft, Path(scratch))
        models, decoder = load(request)
        engine = window_engine(request, models, decoder, args.engine, args.threads)
        app, window = open_window(engine, Path(scratch))
        figures["target"], figures["engine"] = models.target_name, args.engine
        bar = progress_bar(planned_tokens(args.check, args.tokens, args.runs, args.run_tokens, args.repeats),
                           args.progress)
        if args.check in ("long", "all"):
            figures["long"] = report("long", soak_long(app, window, models, args.tokens or 10_000, bar=bar), bar)
        if args.check in ("repeat", "all"):
            figures["repeat"] = report("repeat", soak_repeat(app, window, models, args.runs, args.run_tokens,
                                                             bar=bar), bar)
        if args.check in ("overhead", "all"):
            figures["overhead"] = report("overhead", measure_overhead(app, window, models, decoder,
                                                                      args.tokens or 5_000, args.repeats, bar=bar),
                                         bar)
        bar.close()
        window.shutdown()
        window.close()
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(figures, indent=2))
    return 0


def report(name: str, figures: dict, bar=None) -> dict:
    """Print one check's figures on stdout (above the progress bar, when there is one)."""
    lines = [f"== {name}", *(f"  {key}: {value}" for key, value in figures.items())]
    if bar is not None:
        bar.clear()
    print("\n".join(lines), flush=True)
    if bar is not None:
        bar.refresh()
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
