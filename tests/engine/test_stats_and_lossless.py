"""Theory formulas, running statistics, and losslessness of whole generations on a tiny model."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from app.engine.core.stats import expected_tokens_per_pass, optimal_k, predicted_speedup
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.loading import load_models
from app.engine.settings import AsdSettings, SamplingSettings
from tests.engine.helpers import PROMPTS, chi_square_pvalue, first_two_distribution, run


def test_expected_tokens_per_pass_formula():
    assert expected_tokens_per_pass(0.0, 4) == 1.0
    assert expected_tokens_per_pass(1.0, 4) == 5.0
    assert expected_tokens_per_pass(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    assert predicted_speedup(0.5, 2, 0.0) == pytest.approx(1.75)
    assert predicted_speedup(0.8, 4, 0.1) == pytest.approx((1 - 0.8**5) / 0.2 / 1.4)


@pytest.mark.parametrize("alpha,c", [(0.3, 0.05), (0.6, 0.1), (0.8, 0.02), (0.95, 0.3), (0.1, 0.5)])
def test_optimal_k_is_the_brute_force_best(alpha, c):
    best = max(range(1, 65), key=lambda k: predicted_speedup(alpha, k, c))
    assert predicted_speedup(alpha, optimal_k(alpha, c), c) == pytest.approx(predicted_speedup(alpha, best, c))


def test_running_stats_match_the_pass_events(tiny_llama):
    decoder = SpeculativeDecoder(load_models(*map(str, tiny_llama)))
    passes, end = run(decoder, PROMPTS[0], drafters=("prompt-lookup",), k=3, max_new_tokens=40)
    judged = sum(t.outcome != "clipped" for p in passes for t in p.drafted)
    accepted = sum(p.n_accepted for p in passes)
    ended_by_rejection = sum(any(t.outcome == "rejected" for t in p.drafted)
                             and not any(t.outcome == "clipped" for t in p.drafted) for p in passes)
    assert end.stats.alpha == pytest.approx(accepted / (accepted + ended_by_rejection))  # docs/ALGORITHMS.md §7.1
    assert end.stats.acceptance_rate == pytest.approx(accepted / judged)  # §7.2
    assert end.stats.tokens_per_pass == pytest.approx(40 / len(passes))
    assert passes[-1].stats == end.stats


def test_asd_with_zero_budget_is_strict_greedy_and_ledger_stays_within_budget(tiny_llama):
    decoder = SpeculativeDecoder(load_models(*map(str, tiny_llama)))
    for prompt in PROMPTS:
        _, greedy = run(decoder, prompt, drafters=("draft-model",), k=4, max_new_tokens=48)
        for asd in (AsdSettings(budget=0.0), AsdSettings(gate=0.0), AsdSettings(cap=0)):
            _, strict = run(decoder, prompt, drafters=("draft-model",), k=4, max_new_tokens=48, verify="asd", asd=asd)
            assert strict.token_ids == greedy.token_ids
        passes, _ = run(decoder, prompt, drafters=("draft-model",), k=4, max_new_tokens=48, verify="asd",
                        asd=AsdSettings(budget=3.0, gate=1.0, cap=2))
        spent = [p.ledger.spent for p in passes]
        assert spent == sorted(spent) and spent[-1] <= 3.0 + 1e-9
        assert all(sum(t.outcome == "asd_exception" for t in p.drafted) <= 2 for p in passes)
        for p in passes:
            for i, t in enumerate(p.drafted):
                if t.outcome == "asd_exception":
                    assert t.regret / (len(p.drafted) - i) <= 1.0 + 1e-9 and t.id != t.target_id


@pytest.mark.parametrize("drafters,tree", [(("draft-model",), None), (("prompt-lookup",), None),
                                          (("draft-model",), 6)], ids=["draft-model", "prompt-lookup", "tree"])
def test_sampled_first_two_tokens_follow_the_target(tiny_llama, drafters, tree):
    """Chains, and a draft-model token tree (children drawn i.i.d. from q, docs/ALGORITHMS.md §9.3)."""
    torch.manual_seed(0)
    models = load_models(*map(str, tiny_llama))
    decoder = SpeculativeDecoder(models)
    prompt = "the the the the"
    sampling = SamplingSettings(temperature=1.5, top_k=4)
    exact = first_two_distribution(models, prompt, sampling)
    n = 1200
    counts = Counter()
    for seed in range(n):
        _, end = run(decoder, prompt, drafters=drafters, k=2, max_new_tokens=2, verify="sample", sampling=sampling,
                     seed=seed, tree=tree)
        counts[tuple(end.token_ids)] += 1
    assert set(counts) <= set(exact)
    assert chi_square_pvalue(counts, exact, n) > 1e-3
