"""α, the acceptance rate, tokens per pass and E(α, K) agree (docs/ALGORITHMS.md §6-§7, app/engine/core/stats.py)."""

from __future__ import annotations

import random

import pytest

from app.engine.core.stats import GenerationStats, expected_tokens_per_pass
from app.engine.core.stats import tested_positions as trials_of
from app.engine.events import ACCEPTED, ASD_EXCEPTION, CLIPPED, REJECTED, DraftedToken, Timing

TIMING = Timing(draft_ms=1.0, verify_ms=2.0, total_ms=3.5)


def tokens(*outcomes: str) -> tuple[DraftedToken, ...]:
    return tuple(DraftedToken(id=i, text="", q=None, p=0.5, target_id=i, regret=None, outcome=o)
                 for i, o in enumerate(outcomes))


def bernoulli_pass(rng: random.Random, alpha: float, k: int) -> tuple[tuple[DraftedToken, ...], int]:
    """One pass of the i.i.d. model: drafts accepted with probability alpha until the first rejection."""
    accepted = 0
    while accepted < k and rng.random() < alpha:
        accepted += 1
    outcomes = [ACCEPTED] * accepted + [REJECTED] * (k - accepted)
    return tokens(*outcomes), accepted + 1


def bernoulli_stats(alpha: float, ks: list[int], seed: int = 0) -> GenerationStats:
    rng = random.Random(seed)
    stats = GenerationStats()
    for k in ks:
        drafted, committed = bernoulli_pass(rng, alpha, k)
        stats.add_pass(drafted, committed, TIMING)
    return stats


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("k", [1, 4, 8])
def test_bernoulli_tokens_per_pass_match_e_of_the_estimated_alpha(alpha, k):
    stats = bernoulli_stats(alpha, [k] * 20_000, seed=k)
    assert stats.tokens_per_pass == pytest.approx(expected_tokens_per_pass(stats.alpha, k), rel=0.03)
    assert stats.expected_tokens_per_pass == pytest.approx(stats.tokens_per_pass, rel=0.03)
    assert stats.alpha == pytest.approx(alpha, abs=0.02)
    if k > 1:  # the acceptance rate is biased low and must not be fed to E
        assert stats.acceptance_rate < alpha - 0.02
        assert stats.acceptance_rate == pytest.approx((expected_tokens_per_pass(alpha, k) - 1) / k, abs=0.02)


def test_bernoulli_with_k_changing_mid_run():
    ks = [2] * 6_000 + [6] * 6_000 + [0] * 500  # K switched mid-run, then plain steps
    stats = bernoulli_stats(0.7, ks, seed=1)
    assert stats.draft_lengths == {2: 6_000, 6: 6_000, 0: 500}
    mean_e = (6_000 * expected_tokens_per_pass(stats.alpha, 2) + 6_000 * expected_tokens_per_pass(stats.alpha, 6)
              + 500) / len(ks)
    assert stats.expected_tokens_per_pass == pytest.approx(mean_e)
    assert stats.tokens_per_pass == pytest.approx(mean_e, rel=0.03)
    assert stats.alpha == pytest.approx(0.7, abs=0.02)
    # E of one K for the whole run would be wrong by more than the tolerance
    assert abs(expected_tokens_per_pass(stats.alpha, 6) - stats.tokens_per_pass) > 0.1 * stats.tokens_per_pass


def test_clipped_drafts_are_neither_accepted_nor_rejected():
    stats = GenerationStats()
    stats.add_pass(tokens(ACCEPTED, REJECTED, REJECTED, REJECTED), 2, TIMING)  # A 1, R 1, D 4
    stats.add_pass(tokens(ACCEPTED, ACCEPTED, CLIPPED, CLIPPED), 2, TIMING)  # ended at EOS inside the block
    stats.add_pass(tokens(ACCEPTED, CLIPPED, REJECTED), 1, TIMING)  # a clipped pass counts no rejection
    assert trials_of(tokens(ACCEPTED, CLIPPED, REJECTED)) == [True]
    assert trials_of(tokens(ASD_EXCEPTION, REJECTED, REJECTED)) == [True, False]
    assert (stats.acceptance.accepted, stats.acceptance.rejections, stats.acceptance.judged) == (4, 1, 4 + 2 + 2)
    assert stats.alpha == pytest.approx(4 / 5)
    assert stats.acceptance_rate == pytest.approx(4 / 8)
    assert stats.positions.tested == [3, 2]  # position 1: tested in the first pass (rejected) and the second
    assert stats.alpha_by_position() == [1.0, 0.5]


def test_per_position_rates_divide_by_tested_positions():
    stats = bernoulli_stats(0.6, [5] * 20_000, seed=2)
    for rate in stats.alpha_by_position():  # i.i.d.: flat at alpha (dividing by drafted would fall as alpha^(i+1))
        assert rate == pytest.approx(0.6, abs=0.03)


def test_c_uses_a_one_token_forward_not_the_verify_forward():
    stats = GenerationStats()
    stats.add_pass(tokens(ACCEPTED, REJECTED), 2, Timing(draft_ms=4.0, verify_ms=9.0, total_ms=14.0))
    assert stats.c is None  # no one-token forward timed yet
    stats.add_forward(5.0)
    stats.add_pass((), 1, Timing(draft_ms=0.0, verify_ms=3.0, total_ms=3.5))  # a plain step: t_T = 3 ms
    stats.add_forward(4.0)
    assert stats.target_forward_ms == 4.0  # median of 5, 3, 4
    assert stats.c == pytest.approx((4.0 / 2) / 4.0)
    assert stats.verify_cost == pytest.approx(9.0 / 4.0)
    assert stats.estimated_speedup == pytest.approx(3 * 4.0 / 17.5)


def test_the_median_forward_follows_every_way_the_samples_grow():
    import statistics

    stats = GenerationStats()
    rng = random.Random(4)
    for i in range(41):
        if i % 3:
            stats.add_pass((), 1, Timing(draft_ms=0.0, verify_ms=rng.uniform(1, 9), total_ms=10.0))  # a plain step
        else:
            stats.add_forward(rng.uniform(1, 9))
        assert stats.target_forward_ms == statistics.median(stats.forward_ms)
    stats.forward_ms.append(0.5)  # changed directly, as a caller may
    assert stats.target_forward_ms == statistics.median(stats.forward_ms)
    assert GenerationStats().target_forward_ms is None
