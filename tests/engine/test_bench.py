"""The benchmark runs every method side by side and checks outputs against autoregressive greedy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.bench import methods as bench
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.loading import load_models


def test_benchmark_reports_every_method_and_identity(tiny_llama, tmp_path):
    models = load_models(*map(str, tiny_llama))
    prompts = [bench.BenchPrompt("code", "code", "def add(a, b):\n    return a + b\n\ndef add(", 16)]
    seen, steps = [], []
    results = bench.benchmark(models, prompts, k=3, repeats=2, progress=seen.append,
                              step=lambda done, total, method: steps.append((done, total, method)))
    total = bench.count_steps(len(results), len(prompts), 2)
    assert [done for done, _, _ in steps] == list(range(1, total + 1)) and {t for _, t, _ in steps} == {total}
    assert {method for _, _, method in steps} == {r.method for r in results}
    by_name = {r.method: r for r in results}
    assert {"ours:autoregressive", "hf:autoregressive", "ours:draft-model", "ours:prompt-lookup",
            "ours:ngram-cache", "ours:layer-skip", "hf:assisted", "hf:prompt-lookup"} <= set(by_name)
    assert by_name["ours:autoregressive"].speedup == 1.0
    for name, result in by_name.items():
        assert result.identical, name
        assert len(result.repeats_tokens_per_s) == 2 and result.tokens_per_s > 0
        if name.startswith("ours:") and name != "ours:autoregressive":
            assert result.alpha is not None and result.c is not None and result.predicted > 0
    assert any(message.startswith("warm-up") for message in seen)
    table = bench.markdown_table(results)
    assert table.count("\n") == len(results) + 1
    assert json.loads(bench.to_json(results, {"k": 3}))["results"][0]["method"] == "ours:autoregressive"


def test_benchmark_with_repetition_controls_runs_every_method_with_them(tiny_llama):
    """Ours and Hugging Face's methods alike: every one still matches our autoregressive run, which the controls
    changed."""
    from app.engine.settings import RepetitionSettings

    models = load_models(*map(str, tiny_llama))
    prompts = [bench.BenchPrompt("prose", "prose", "The quick brown fox jumps over the lazy dog. The quick", 24)]
    only = {"hf:autoregressive", "ours:draft-model", "ours:prompt-lookup", "hf:assisted", "hf:prompt-lookup"}
    results = bench.benchmark(models, prompts, k=3, repeats=1, only=only, repetition=RepetitionSettings(1.3, 3))
    assert {r.method for r in results} == only | {bench.OURS_AR}
    assert all(r.identical and r.identity == "identical" for r in results), [(r.method, r.identity) for r in results]
    decoder = SpeculativeDecoder(models)
    with_controls = bench.ours(decoder, (), 3, RepetitionSettings(1.3, 3))(prompts[0]).token_ids
    assert with_controls != bench.ours(decoder, (), 3)(prompts[0]).token_ids


def test_committed_prompt_set_has_code_and_prose():
    prompts = bench.load_prompts()
    assert {p.kind for p in prompts} == {"code", "prose"}
    assert len({p.max_new_tokens for p in prompts}) > 1


def test_the_held_out_prompt_set_loads_as_bench_prompts():
    path = Path(__file__).resolve().parents[2] / "tools" / "train" / "demo_training" / "heldout_prompts.json"
    entries = json.loads(path.read_text())["prompts"]
    prompts = bench.load_prompts(path)
    assert [(p.name, p.kind, p.prompt) for p in prompts] == [(e["id"], e["domain"], e["text"]) for e in entries]
    assert {p.kind for p in prompts} == {"code", "prose"}
    assert all(p.max_new_tokens == bench.HELD_OUT_MAX_NEW_TOKENS for p in prompts)


def test_quick_prompts_take_one_of_each_kind_and_fewer_tokens():
    prompts = bench.quick_prompts(bench.load_prompts())
    assert len(prompts) == bench.QUICK_PROMPTS and {p.kind for p in prompts} == {"code", "prose"}
    assert all(p.max_new_tokens <= bench.QUICK_MAX_NEW_TOKENS for p in prompts)


def test_quick_bench_runs_end_to_end_and_says_so(tiny_llama, tmp_path, capsys):
    from dataclasses import fields

    from app import cli

    out = tmp_path / "bench.json"
    target, draft = map(str, tiny_llama)
    assert cli.main(["bench", "methods", "--quick", "--target", target, "--draft-model", draft, "--k", "3",
                     "--json", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr()
    assert "quick run" in printed.out and printed.err == ""  # no bar when asked for none
    data = json.loads(out.read_text())
    assert data["meta"]["quick"] is True and data["meta"]["repeats"] == 1
    assert len(data["meta"]["prompts"]) == bench.QUICK_PROMPTS
    by_name = {r["method"]: r for r in data["results"]}
    assert set(by_name) == set(bench.QUICK_METHODS)
    every_field = {f.name for f in fields(bench.MethodResult)}
    for name, result in by_name.items():
        assert set(result) == every_field, name
        assert result["identical"] is True and result["tokens_per_s"] > 0 and result["speedup"] > 0, name
        assert len(result["repeats_tokens_per_s"]) == 1 and result["peak_memory_mb"] > 0, name
        if name.startswith("ours:") and name != bench.OURS_AR:
            for figure in ("alpha", "acceptance_rate", "tokens_per_pass", "expected_tokens_per_pass", "c",
                           "predicted", "efficiency", "overhead"):
                assert result[figure] is not None, (name, figure)


def test_asd_sweep_runs_end_to_end_and_its_json_has_every_field(tiny_llama, tmp_path, capsys):
    import math
    from dataclasses import fields

    from app import cli
    from app.bench import asd as asd_sweep

    out, png = tmp_path / "asd.json", tmp_path / "asd.png"
    target, draft = map(str, tiny_llama)
    assert cli.main(["bench", "asd", "--target", target, "--draft-model", draft, "--k", "3", "--budgets", "0,8,inf",
                     "--gates", "0.25,4", "--caps", "2", "--drafter", "draft-model", "--drafter",
                     "prompt-lookup", "--max-prompts", "2", "--repeats", "1", "--json", str(out), "--plot", str(png),
                     "--no-progress"]) == 0
    assert "rel tok/s" in capsys.readouterr().out
    data = json.loads(out.read_text())
    points, strict = data["points"], data["strict"]
    assert {p["drafter"] for p in points} == {s["drafter"] for s in strict} == {"draft-model", "prompt-lookup"}
    assert len(points) == 2 * len(asd_sweep.grid((0.0, 8.0, math.inf), (0.25, 4.0), (2,))) == 2 * 5
    assert all(set(p) == {f.name for f in fields(asd_sweep.PointResult)} for p in points)
    assert all(set(s) == {f.name for f in fields(asd_sweep.StrictResult)} for s in strict)
    for p in points:
        assert p["relative_tokens_per_s"] > 0 and len(p["first_divergence"]) == len(data["meta"]["prompts"]) == 2
        if p["budget"] == 0:  # strict greedy under the ASD rule: the same output, nothing spent or saved
            assert (p["diverged"], p["edit_distance"], p["exceptions"], p["regret_spent"], p["reused"],
                    p["passes_saved"], p["log_prob_delta"]) == (0, 0, 0, 0, 0, 0, 0)
        assert (p["budget"] is None) == (p["budget_text"] == "inf")  # unbounded B is null in strict JSON
        assert p["is_default"] == ((p["budget_text"], p["gate"], p["cap"]) == ("8", 0.25, 2))
        assert p["saved"] == pytest.approx(p["exceptions"] + p["reused"])
    assert any(p["is_default"] for p in points) and any(p["frontier"] for p in points)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_frontier_keeps_the_points_no_other_beats_on_both_axes():
    from app.bench import asd as asd_sweep

    def point(speed, delta):
        return asd_sweep.PointResult("d", 1.0, "1", 0.25, 2, False, speed, [speed], 1.0, 1.0, 1, 0.0, 0.0, 0.0, 0.0,
                                     0.0, 0.0, [], 0, 0.0, None, delta, [], None)

    points = [point(1.2, -0.1), point(1.1, -0.2), point(0.9, 0.1), point(1.3, -0.3), point(0.95, -0.01)]
    asd_sweep.mark_frontier([], points)
    # (1.1, -0.2) loses to (1.2, -0.1); (0.95, -0.01) to strict greedy at (1, 0)
    assert [p.frontier for p in points] == [True, False, True, True, False]
