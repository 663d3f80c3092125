"""tools/measure/host_overhead.py times both loops on one tiny model and reports their ratio."""

from __future__ import annotations

import json

from tools.measure import host_overhead


def test_both_loops_are_timed_side_by_side(capsys):
    assert host_overhead.main(["--layers", "1", "--tokens", "8", "--repeats", "1"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ms = report["ms_per_token"]
    assert set(ms) == {"ours", "generate"} and all(value > 0 for value in ms.values())
    assert report["generate_over_ours"] == round(ms["generate"] / ms["ours"], 3)
    assert report["layers"] == 1 and report["tokens"] == 8
