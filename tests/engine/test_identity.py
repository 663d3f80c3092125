"""Greedy identity in half precision: "identical", a numerical tie, or a real mismatch (app/engine/core/identity.py)."""

from __future__ import annotations

import pytest
import torch

from app.engine.core.identity import Identity, classify, tolerance

REFERENCE = [5, 9, 2, 7, 7, 1]


def logits_with(top: dict[int, float], vocab: int = 16) -> torch.Tensor:
    logits = torch.full((vocab,), -4.0)
    for token, value in top.items():
        logits[token] = value
    return logits  # (V,)


def test_equal_sequences_are_identical():
    verdict = classify(REFERENCE, list(REFERENCE), None, torch.bfloat16)
    assert verdict == Identity("identical") and verdict.identical and str(verdict) == "identical"


def test_divergence_between_two_nearly_equal_top_logits_is_a_numerical_tie():
    candidate = REFERENCE[:3] + [11, 3, 3]
    logits = logits_with({7: 12.5, 11: 12.5 - 0.0625})  # one bf16 step apart at this magnitude
    verdict = classify(REFERENCE, candidate, logits, torch.bfloat16)
    assert verdict.outcome == "tie" and verdict.index == 3 and verdict.gap == pytest.approx(0.0625)
    assert str(verdict) == "diverged at token 3, a numerical tie (top-2 gap 0.0625)"


def test_the_same_gap_in_float32_is_a_real_mismatch():
    candidate = REFERENCE[:3] + [11, 3, 3]
    logits = logits_with({7: 12.5, 11: 12.5 - 0.0625})
    verdict = classify(REFERENCE, candidate, logits, torch.float32)
    assert verdict.outcome == "mismatch" and verdict.index == 3
    assert str(verdict).startswith("diverged at token 3, a real mismatch (logit gap 0.0625")


def test_a_clear_preference_is_a_real_mismatch_even_in_bfloat16():
    candidate = REFERENCE[:3] + [11, 3, 3]
    verdict = classify(REFERENCE, candidate, logits_with({7: 12.5, 11: 9.0}), torch.bfloat16)
    assert verdict.outcome == "mismatch" and verdict.gap == pytest.approx(3.5)
    assert verdict.gap > verdict.tolerance == tolerance(logits_with({7: 12.5, 11: 9.0}), torch.bfloat16)


def test_a_candidate_token_outside_the_top_two_is_a_mismatch_however_close():
    candidate = REFERENCE[:3] + [11, 3, 3]
    logits = logits_with({7: 12.5, 4: 12.49, 11: 12.48})  # 11 is third
    assert classify(REFERENCE, candidate, logits, torch.bfloat16).outcome == "mismatch"


def test_a_run_that_stops_early_or_has_no_logits_is_a_mismatch_not_a_tie():
    assert classify(REFERENCE, REFERENCE[:4], None, torch.bfloat16) == Identity("mismatch", 4)
    assert str(classify(REFERENCE, [5, 9, 3], None, torch.float16)) == "diverged at token 2, a real mismatch"


def test_tolerance_scales_with_the_dtype_and_the_logits():
    logits = logits_with({1: 20.0})
    assert tolerance(logits, torch.float32) < tolerance(logits, torch.float16) < tolerance(logits, torch.bfloat16)
    assert tolerance(logits_with({1: 40.0}), torch.bfloat16) == pytest.approx(2 * tolerance(logits, torch.bfloat16))


def test_race_reports_identity_where_the_rule_promises_it(tiny_llama):
    from app.engine.loading import load_models
    from app.engine.race import Race, RaceResult
    from app.engine.settings import DecodeSettings

    models = load_models(str(tiny_llama[0]), str(tiny_llama[1]))
    prompt = "def add(a, b):\n    return a + b\n\ndef add("
    greedy = list(Race(models).generate(prompt, DecodeSettings(drafters=("draft-model",), max_new_tokens=12)))[-1]
    assert isinstance(greedy, RaceResult) and str(greedy.identity) == "identical"
    sampled = list(Race(models).generate(prompt, DecodeSettings(drafters=("draft-model",), verify="sample",
                                                                max_new_tokens=12)))[-1]
    assert sampled.identity is None  # sampling promises no identity: nothing to judge
