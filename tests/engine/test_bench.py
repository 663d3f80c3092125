"""The benchmark runs every method side by side and checks outputs against autoregressive greedy."""

from __future__ import annotations

import json

from app.engine import bench
from app.engine.loading import load_models


def test_benchmark_reports_every_method_and_identity(tiny_llama, tmp_path):
    models = load_models(*map(str, tiny_llama))
    prompts = [bench.BenchPrompt("code", "code", "def add(a, b):\n    return a + b\n\ndef add(", 16)]
    seen = []
    results = bench.benchmark(models, prompts, k=3, repeats=2, progress=seen.append)
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


def test_committed_prompt_set_has_code_and_prose():
    prompts = bench.load_prompts()
    assert {p.kind for p in prompts} == {"code", "prose"}
    assert len({p.max_new_tokens for p in prompts}) > 1
