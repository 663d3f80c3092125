"""The soak checks of tools/measure/soak.py at a size the suite can afford: a long run in the window with live charts,
consecutive generations, and the window-vs-headless comparison. Full size: `python -m tools.measure.soak`
(figures in the project's notes)."""

from __future__ import annotations

from tools.measure import soak


def test_long_run_then_repeated_runs_stay_bounded(qtbot, tmp_path):
    request = soak.model_request(None, None, tmp_path)
    engine = soak.start_engine_process(request, threads=1)
    models = engine.summary
    assert models.context_length >= 10_000  # the long-context tiny model the full soak needs
    app, window = soak.open_window(engine, tmp_path)
    qtbot.addWidget(window)
    try:
        long = soak.soak_long(app, window, models, tokens=800)
        print(long)
        assert long["tokens"] == 800 and long["reason"] == "max_tokens"
        assert long["view_tokens"] > 0 and long["ticks"] > 0
        assert long["rss_growth_mb"] < 150  # generous: the shared machine's allocator is noisy at this size

        repeat = soak.soak_repeat(app, window, models, runs=8, tokens=24)
        print(repeat)
        assert repeat["thread_growth"] == 0 and repeat["qobject_growth"] <= 0
        assert all(sample["session_events"] <= 2 + 24 + 4 for sample in repeat["samples"])  # one run's history
        assert repeat["gc_object_growth"] < 2_000, repeat["samples"]

        local_models, decoder = soak.load(request)  # headless runs in this process
        overhead = soak.measure_overhead(app, window, local_models, decoder, tokens=60, repeats=2)
        print(overhead)
        assert len(overhead["window_tokens_per_s"]) == len(overhead["headless_tokens_per_s"]) == 2
        assert overhead["full_gc"] == [0, 0]
    finally:
        window.shutdown()
        window.close()
    assert not engine.alive  # closing the window ended its engine process
