"""tools/measure/real_size_costs.py at tiny size: every row has its split, and the decoder is left unwrapped."""

from __future__ import annotations

import json

from app.engine.decoding import decoder
from tools.measure import real_size_costs


def test_real_size_costs_splits_the_pass_and_restores_the_decoder(tmp_path):
    before = decoder.pass_detail
    out = tmp_path / "costs.json"
    assert real_size_costs.main(["--tiny", "--tokens", "6", "--prompts", "1", "--shape", "smollm2-135m",
                                 "--json", str(out)]) == 0
    assert decoder.pass_detail is before
    (shape,) = json.loads(out.read_text())["shapes"]
    assert [row["method"] for row in shape["rows"]] == ["plain", "prompt-lookup"]
    for row in shape["rows"]:
        assert 0 < row["outside_share"] < 1 and row["tokens"] == 6
        assert set(row["steps_ms_per_pass"]) == set(real_size_costs.STEPS)
        steps = row["steps_ms_per_pass"]
        assert all(steps[step] > 0 for step in ("softmax", "verify_rule", "detok", "inspector"))
        assert row["pickle_bytes_per_token"] > 0 and row["tracemalloc_bytes_per_token"] > 0
