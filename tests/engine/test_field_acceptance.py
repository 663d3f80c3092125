"""Acceptance in vLLM's and SGLang's terms beside α (docs/ALGORITHMS.md §7.7, app/engine/core/stats.py)."""

from __future__ import annotations

import json

import pytest

from app.engine.core.stats import GenerationStats, truncated_geometric
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import ACCEPTED, BONUS, CLIPPED, REJECTED, TreeNode, to_json_line
from app.engine.loading import load_models
from tests.engine.helpers import run
from tests.engine.test_acceptance_stats import TIMING, tokens

A, R, C = ACCEPTED, REJECTED, CLIPPED


def stats_of(*passes: tuple[str, ...]) -> GenerationStats:
    stats = GenerationStats()
    for outcomes in passes:
        drafted = tokens(*outcomes)
        stats.add_pass(drafted, sum(o == A for o in outcomes) + 1, TIMING)
    return stats


def test_hand_built_passes_give_the_field_figures_exactly():
    # K = 3 four times: 3 accepted (bonus), 1 accepted, 0 accepted, 2 accepted; then a plain step
    stats = stats_of((A, A, A), (A, R, R), (R, R, R), (A, A, R), ())
    summary = stats.acceptance_summary()
    assert summary.drafting_passes == 4  # the plain step drafted nothing
    assert summary.accepted == 6
    assert summary.drafted == 12
    assert summary.mean_acceptance_length == pytest.approx(1 + 6 / 4)
    assert summary.draft_acceptance_rate == pytest.approx(6 / 12)
    assert summary.histogram == (1, 1, 1, 1)
    # vLLM: passes that accepted position i / drafting passes
    assert summary.acceptance_by_position == pytest.approx((3 / 4, 2 / 4, 1 / 4))
    # ours: accepted at i / tested at i
    assert summary.alpha_by_position == pytest.approx((3 / 4, 2 / 3, 1 / 2))
    alpha = 6 / (6 + 3)
    assert stats.alpha == pytest.approx(alpha)
    assert summary.predicted_histogram == pytest.approx(
        (4 * (1 - alpha), 4 * alpha * (1 - alpha), 4 * alpha ** 2 * (1 - alpha), 4 * alpha ** 3))


def test_prediction_mixes_each_pass_k_and_a_clipped_pass_enters_at_its_kept_length():
    # K = 1, K = 4, and a K = 4 pass whose last two drafts the end of the generation clipped (K_j = 2)
    stats = stats_of((A,), (A, A, R, R), (A, A, C, C))
    summary = stats.acceptance_summary()
    assert summary.histogram == (0, 1, 2, 0, 0)
    assert summary.drafted == 1 + 4 + 2  # clipped drafts were never judged
    alpha = 5 / (5 + 1)
    expected = [0.0] * 5
    for k in (1, 4, 2):
        for j, p in enumerate(truncated_geometric(alpha, k)):
            expected[j] += p
    assert summary.predicted_histogram == pytest.approx(tuple(expected))
    assert sum(summary.predicted_histogram) == pytest.approx(summary.drafting_passes)
    assert summary.acceptance_by_position == pytest.approx((1.0, 2 / 3, 0.0, 0.0))


def test_truncated_geometric_is_a_distribution():
    for alpha in (0.0, 0.3, 0.9, 1.0):
        for k in (0, 1, 5):
            probabilities = truncated_geometric(alpha, k)
            assert len(probabilities) == k + 1
            assert sum(probabilities) == pytest.approx(1.0)
    assert truncated_geometric(0.5, 2) == pytest.approx([0.5, 0.25, 0.25])


def test_a_run_without_drafts_has_no_acceptance_length():
    summary = stats_of((), ()).acceptance_summary()
    assert summary.drafting_passes == 0
    assert summary.mean_acceptance_length is None
    assert summary.histogram == (0,)
    assert summary.acceptance_by_position == ()


def test_tree_passes_are_counted_but_not_predicted():
    stats = GenerationStats()
    nodes = (TreeNode(0, 5, "", -1, 1, None, 0.5, 5, A), TreeNode(1, 6, "", 0, 2, None, 0.5, 7, R),
             TreeNode(2, 7, "", 0, 2, None, 0.5, 7, A))
    stats.add_pass(tokens(A, A), 3, TIMING, tree=nodes)
    stats.add_pass(tokens(A, R), 2, TIMING)
    summary = stats.acceptance_summary()
    assert summary.histogram == (0, 1, 1)
    assert summary.predicted_histogram is None


@pytest.fixture(scope="module")
def bundled():
    return SpeculativeDecoder(load_models())


def test_greedy_run_with_a_bonus_mean_acceptance_length_is_tokens_per_pass(bundled):
    passes, end = run(bundled, "def fibonacci(n):", drafters=("draft-model",), k=4, max_new_tokens=40)
    assert end.reason == "max_tokens"
    assert all(p.drafted for p in passes)
    assert any(p.appended is not None and p.appended.kind == BONUS for p in passes)
    summary = end.acceptance
    assert summary is not None
    assert summary.mean_acceptance_length == pytest.approx(end.stats.tokens_per_pass)
    assert summary.drafting_passes == len(passes) == sum(summary.histogram)
    assert summary.histogram == tuple(sum(p.n_accepted == j for p in passes) for j in range(len(summary.histogram)))
    assert sum(summary.predicted_histogram) == pytest.approx(len(passes))
    assert json.loads(to_json_line(end))["acceptance"]["histogram"] == list(summary.histogram)
