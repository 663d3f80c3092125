"""tools/device_check.py runs end to end at tiny size on the CPU and writes every section of its JSON."""

from __future__ import annotations

import json

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
    assert [shape["shape"] for shape in report["timing"]] == ["Qwen2.5-0.5B (tiny)", "Llama-3.2-1B (tiny)"]
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
    assert report["meta"]["device"] == "cpu" and report["meta"]["tiny"] is True


def test_a_failing_section_is_recorded_and_fails_the_run(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no such kernel")

    from tools.measure import half_precision

    passed = lambda *args, **kwargs: {"passed": True}  # noqa: E731 - the other sections, instantly
    for check in ("check_greedy_identity", "check_chi_square", "check_asd_against_cpu", "check_cache"):
        monkeypatch.setattr(device_check, check, passed)
    monkeypatch.setattr(half_precision, "measure", lambda *args, **kwargs: {"rows": []})
    monkeypatch.setattr(half_precision, "markdown", lambda result: "")
    monkeypatch.setattr(device_check, "time_shape", broken)
    monkeypatch.setattr(device_check, "TIMING_SHAPES", ("qwen2.5-0.5b",))
    monkeypatch.setattr(device_check, "IDENTITY_ARCHS", ("llama",))
    status = device_check.main(["--out", str(tmp_path), "--device", "cpu", "--tiny"])
    report = json.loads((tmp_path / "device_check.json").read_text())
    assert status == 1 and report["passed"] is False
    assert [e["section"] for e in report["errors"]] == ["timing qwen2.5-0.5b"]
    assert "no such kernel" in report["errors"][0]["error"]
