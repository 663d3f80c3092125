"""tools/device_check.py runs end to end at tiny size on the CPU and writes every section of its JSON."""

from __future__ import annotations

import json

import pytest
import torch

from app.engine.hf_compat import versions
from tools import device_check


def test_device_check_runs_every_section_at_tiny_size_on_cpu(tmp_path):
    status = device_check.main(["--out", str(tmp_path / "out"), "--device", "cpu", "--tiny"])
    report = json.loads((tmp_path / "out" / "device_check.json").read_text())
    assert report["errors"] == []
    assert status == 0 and report["passed"] is True
    assert set(report["checks"]) == {"greedy_identity", "chi_square", "asd_against_cpu", "cache_against_recompute"}
    assert all(check["passed"] for check in report["checks"].values())
    assert report["checks"]["chi_square"]["rows"][0]["pvalue"] > 0
    for check in ("greedy_identity", "cache_against_recompute"):  # every check runs both caches
        rows = report["checks"][check]["runs" if check == "greedy_identity" else "rows"]
        assert {row["mode"] for row in rows} == {"eager dynamic", "eager static"}
    half = report["half_precision"]
    assert half["dtype"] == "bfloat16" and half["device"] == "cpu" and half["rows"]
    assert [shape["shape"] for shape in report["timing"]] == ["Qwen2.5-0.5B (tiny)", "Llama-3.2-1B (tiny)",
                                                               "Llama-3.1-8B (tiny)"]
    assert report["profile"]["shape"] == "Qwen2.5-0.5B (tiny)" and report["skipped"] == []
    for shape in report["timing"]:
        assert shape["bound_ms_per_forward"] > 0 and shape["hbm_gbps"] == 4800.0
        methods = {row["method"]: row for row in shape["rows"]}
        assert set(methods) == {"ours:autoregressive", "ours:prompt-lookup", "ours:draft-model",
                                "fast:autoregressive", "fast:prompt-lookup", "fast:draft-model",
                                "hf:autoregressive", "hf:autoregressive static", "hf:prompt-lookup", "hf:assisted"}
        assert all(row["ms_per_token"] > 0 and row["times_bound"] > 0 and row["warm_up_s"] > 0
                   for row in methods.values())
        assert all(methods[name]["identical_to_ours_autoregressive"]  # float32 on the CPU: the same greedy ids
                   for name in ("ours:autoregressive", "fast:autoregressive", "fast:draft-model",
                                "hf:autoregressive static"))
        # On the CPU the fast path is the static cache, eager (compiling is off there by default).
        assert shape["fast_path"] == {"mode": "static cache", "cache": "static", "compiled": False,
                                      "compile_failure": None}
        assert shape["goals"]["fast_autoregressive_times_bound"] > 0
        assert shape["goals"]["fast_draft_model_vs_hf_assisted"] > 0
        assert shape["goals"]["eager_autoregressive_vs_generate"] > 0
    assert [shape["goals"]["fast_autoregressive_bound_goal"] for shape in report["timing"]] == [6.0, 3.0, 1.5]
    load = report["compile_load"]  # two fresh processes, the second finding the first's compile cache
    assert load["shape"] == "Llama-3.1-8B (tiny)" and set(load["goals"]) == {"cold", "warm"}
    for launch in ("cold", "warm"):
        assert load[launch]["compile_failure"] is None and load[launch]["steps"] > 0
        assert load["goals"][launch]["seconds"] == load[launch]["compile_s"] > 0
    assert report["meta"]["device"] == "cpu" and report["meta"]["tiny"] is True
    assert report["meta"]["transformers"] == versions()["transformers"]
    assert report["meta"]["sections"] == device_check.section_names()
    assert report["meta"]["torch"] == torch.__version__ and report["meta"]["cuda"] == torch.version.cuda
    assert report["meta"]["gpu"] is None


def test_sections_run_in_order_within_the_budget_and_the_json_is_written_after_each(tmp_path, monkeypatch):
    seconds = dict(device_check.SECTION_SECONDS, **{"timing:llama3.1-8b": 100_000})  # never fits the budget
    monkeypatch.setattr(device_check, "SECTION_SECONDS", seconds)
    written: list[list[str]] = []
    original = device_check.profile_fast_path

    def watched(*args, **kwargs):  # the checks chosen before it are in the file when the profile starts
        written.append(list(json.loads((tmp_path / "device_check.json").read_text())["checks"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(device_check, "profile_fast_path", watched)
    status = device_check.main(["--out", str(tmp_path), "--device", "cpu", "--tiny", "--budget", "600",
                                "--sections", "timing:llama3.1-8b,profile,chi_square"])
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert status == 0 and report["errors"] == [] and written == [["chi_square"]]
    assert report["meta"]["sections"] == ["chi_square", "profile", "timing:llama3.1-8b"]  # correctness first
    assert list(report["checks"]) == ["chi_square"] and report["timing"] == []
    assert [entry["section"] for entry in report["skipped"]] == ["timing:llama3.1-8b"]
    assert "needs about 10000 s" in report["skipped"][0]["reason"]
    rows = {row["method"]: row for row in report["profile"]["rows"]}
    assert set(rows) == {"autoregressive", "draft-model"}
    for row in rows.values():  # key averages as text; no CUDA runtime calls on the CPU
        text = (tmp_path / row["file"]).read_text()
        assert "sorted by self CPU time" in text and "aten::" in text and row["tokens"] > 0
        assert row["per_token"] == {"synchronizations": 0, "graph_launches": 0, "kernel_launches_outside_graphs": 0}


def test_an_unknown_section_is_refused_with_the_names(tmp_path, capsys):
    with pytest.raises(SystemExit):
        device_check.main(["--out", str(tmp_path), "--device", "cpu", "--sections", "timing,profiles"])
    assert "unknown section(s) profiles" in capsys.readouterr().err


def test_a_failing_section_is_recorded_and_fails_the_run(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no such kernel")

    from tools.measure import half_precision

    passed = lambda *args, **kwargs: {"passed": True}  # noqa: E731 - the other sections, instantly
    for check in ("check_greedy_identity", "check_chi_square", "check_asd_against_cpu", "check_cache",
                  "profile_fast_path"):
        monkeypatch.setattr(device_check, check, passed)
    monkeypatch.setattr(half_precision, "measure", lambda *args, **kwargs: {"rows": []})
    monkeypatch.setattr(half_precision, "markdown", lambda result: "")
    monkeypatch.setattr(device_check, "time_shape", broken)
    monkeypatch.setattr(device_check, "TIMING_SHAPES", ("qwen2.5-0.5b",))
    monkeypatch.setattr(device_check, "IDENTITY_ARCHS", ("llama",))
    status = device_check.main(["--out", str(tmp_path), "--device", "cpu", "--tiny"])
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert status == 1 and report["passed"] is False
    assert [e["section"] for e in report["errors"]] == ["timing:qwen2.5-0.5b"]
    assert "no such kernel" in report["errors"][0]["error"]
