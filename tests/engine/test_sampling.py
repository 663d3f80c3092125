"""Warping (temperature, top-k, top-p) and the TokenSampler shared by target and drafters."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from app.engine.core.sampling import TokenSampler, greedy_probs, warp_probs
from app.engine.settings import SamplingSettings

FAST = settings(max_examples=50, deadline=None)


def logits_from(seed: int, shape: tuple[int, ...], scale: float = 2.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen) * scale


def kept(probs: torch.Tensor) -> set[int]:
    return set(torch.nonzero(probs > 0).flatten().tolist())


# ---------------------------------------------------------------- temperature


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature_scales_logits_before_softmax(temperature):
    z = logits_from(0, (3, 7))
    got = warp_probs(z, SamplingSettings(temperature=temperature))
    assert torch.allclose(got, torch.softmax(z / temperature, dim=-1), atol=1e-7)


def test_low_temperature_concentrates_and_high_temperature_flattens():
    z = torch.tensor([2.0, 1.0, 0.0])
    cold = warp_probs(z, SamplingSettings(temperature=0.1))
    hot = warp_probs(z, SamplingSettings(temperature=100.0))
    assert cold[0] > 0.99
    assert torch.allclose(hot, torch.full((3,), 1 / 3), atol=1e-2)


# ---------------------------------------------------------------- top-k


@FAST
@given(seed=st.integers(0, 2**31 - 1), v=st.integers(2, 12), k=st.integers(1, 14))
def test_top_k_keeps_exactly_the_k_largest(seed, v, k):
    z = logits_from(seed, (v,))  # continuous: no ties
    probs = warp_probs(z, SamplingSettings(top_k=k))
    expected = set(torch.topk(z, min(k, v)).indices.tolist())
    assert kept(probs) == expected
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-6)
    # the kept tokens keep their relative odds
    idx = sorted(expected)
    assert torch.allclose(probs[idx], torch.softmax(z[idx], dim=-1), atol=1e-6)


def test_top_k_keeps_ties_with_the_kth_value():
    z = torch.tensor([3.0, 1.0, 3.0, 3.0, 0.0])
    probs = warp_probs(z, SamplingSettings(top_k=2))
    assert kept(probs) == {0, 2, 3}
    assert torch.allclose(probs[[0, 2, 3]], torch.full((3,), 1 / 3))


def test_top_k_zero_is_off():
    z = logits_from(1, (6,))
    assert torch.equal(warp_probs(z, SamplingSettings(top_k=0)), torch.softmax(z, dim=-1))


# ---------------------------------------------------------------- top-p


def smallest_top_p_set(probs: torch.Tensor, top_p: float) -> tuple[set[int], float]:
    """Brute force: walk tokens by decreasing probability until the mass reaches top_p."""
    order = sorted(range(len(probs)), key=lambda i: -float(probs[i]))
    chosen, mass, margin = set(), 0.0, float("inf")
    for i in order:
        chosen.add(i)
        mass += float(probs[i])
        margin = min(margin, abs(mass - top_p))
        if mass >= top_p:
            break
    return chosen, margin


@FAST
@given(seed=st.integers(0, 2**31 - 1), v=st.integers(2, 12), top_p=st.floats(0.01, 0.999))
def test_top_p_keeps_the_smallest_set_reaching_top_p(seed, v, top_p):
    z = logits_from(seed, (v,))
    base = torch.softmax(z, dim=-1).double()
    expected, margin = smallest_top_p_set(base, top_p)
    assume(margin > 1e-5)  # the float32 boundary itself is not what we test
    probs = warp_probs(z, SamplingSettings(top_p=top_p))
    assert kept(probs) == expected
    assert len(expected) >= 1
    assert base[sorted(expected)].sum() >= top_p
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-6)
    assert torch.all(probs[[i for i in range(v) if i not in expected]] == 0)


def test_tiny_top_p_keeps_only_the_top_token():
    z = torch.tensor([0.5, 2.0, 1.9, -1.0])
    probs = warp_probs(z, SamplingSettings(top_p=1e-9))
    assert torch.equal(probs, torch.tensor([0.0, 1.0, 0.0, 0.0]))


def test_top_p_one_keeps_every_token_even_tiny_ones():
    z = torch.tensor([30.0, 0.0, -30.0])
    probs = warp_probs(z, SamplingSettings(top_p=1.0))
    assert torch.all(probs > 0)


def test_top_p_counts_a_token_that_crosses_the_threshold():
    probs = torch.tensor([0.5, 0.3, 0.2])
    z = probs.log()
    # 0.5 < 0.6 -> the second token is needed; 0.5 + 0.3 >= 0.6 -> stop there.
    assert kept(warp_probs(z, SamplingSettings(top_p=0.6))) == {0, 1}
    # exactly reaching top_p is enough (>=)
    assert kept(warp_probs(z, SamplingSettings(top_p=0.5))) == {0}


def test_top_p_keeps_every_token_tied_with_the_boundary_token():
    z = torch.tensor([0.5, 0.25, 0.25, 0.125, 0.125]).log()
    # 0.5 < 0.6: one of the two 0.25 tokens is needed, and which one is only the sort's choice: keep both.
    assert kept(warp_probs(z, SamplingSettings(top_p=0.6))) == {0, 1, 2}
    assert kept(warp_probs(z, SamplingSettings(top_p=0.9))) == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_p_cut_is_exact_far_below_float32_rounding_of_the_mass(seed):
    """top_p a hair (1e-9, a sixtieth of float32's epsilon) on either side of an exact prefix mass."""
    z = logits_from(seed, (4000,), scale=0.5)  # a flat distribution: the boundary needs thousands of tokens
    probs = torch.softmax(z, dim=-1)  # (V,) float32: the distribution top-p cuts
    exact = [Fraction(0)]
    for value in sorted(probs.tolist(), reverse=True):  # float32 values, summed exactly
        exact.append(exact[-1] + Fraction(value))
    for j in (900, 2000, 3100):  # M_j, the exact mass of the j most probable tokens
        for top_p in (float(exact[j]) - 1e-9, float(exact[j]) + 1e-9):
            expected = sum(1 for mass_before in exact[:-1] if mass_before < Fraction(top_p))
            assert len(kept(warp_probs(z, SamplingSettings(top_p=top_p)))) == expected, (j, top_p)


def test_order_is_temperature_then_top_k_then_top_p():
    z = torch.tensor([2.0, 1.5, 1.0, 0.0, -1.0])
    s = SamplingSettings(temperature=0.5, top_k=3, top_p=0.8)
    scaled = z / 0.5
    after_k = torch.softmax(scaled[:3], dim=-1)  # top-p sees the top-k renormalised mass
    expected, _ = smallest_top_p_set(after_k.double(), 0.8)
    expected_probs = torch.zeros(5)
    idx = sorted(expected)
    expected_probs[idx] = torch.softmax(scaled[idx], dim=-1)
    assert torch.allclose(warp_probs(z, s), expected_probs, atol=1e-6)


# ---------------------------------------------------------------- shapes, dtypes


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_input_is_warped_in_float32(dtype):
    z = logits_from(3, (4, 9)).to(dtype)
    s = SamplingSettings(temperature=0.7, top_k=5, top_p=0.9)
    got = warp_probs(z, s)
    assert got.dtype == torch.float32
    assert torch.equal(got, warp_probs(z.float(), s))
    assert greedy_probs(z).dtype == torch.float32


def test_leading_dimensions_are_independent_rows():
    z = logits_from(4, (2, 3, 8))
    s = SamplingSettings(temperature=1.3, top_k=4, top_p=0.7)
    got = warp_probs(z, s)
    assert got.shape == (2, 3, 8)
    for i in range(2):
        for j in range(3):
            assert torch.equal(got[i, j], warp_probs(z[i, j], s))
    assert torch.allclose(got.sum(-1), torch.ones(2, 3), atol=1e-6)


def test_greedy_probs_is_plain_softmax():
    z = logits_from(5, (3, 6))
    assert torch.equal(greedy_probs(z), torch.softmax(z, dim=-1))


# ---------------------------------------------------------------- TokenSampler


def test_greedy_sampler_picks_the_first_maximum():
    sampler = TokenSampler(None, torch.Generator().manual_seed(0))
    assert sampler.is_greedy
    z = torch.tensor([[1.0, 3.0, 3.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
    probs = sampler.probs(z)
    assert torch.equal(probs, torch.softmax(z, dim=-1))
    assert sampler.pick(probs).tolist() == [1, 0]
    assert sampler.pick(probs[0]).shape == ()


def test_sampling_sampler_warps_like_warp_probs_and_keeps_shape():
    s = SamplingSettings(temperature=0.8, top_k=3)
    sampler = TokenSampler(s, torch.Generator().manual_seed(0))
    assert not sampler.is_greedy
    z = logits_from(6, (2, 5, 7))
    probs = sampler.probs(z)
    assert torch.equal(probs, warp_probs(z, s))
    ids = sampler.pick(probs)
    assert ids.shape == (2, 5) and ids.dtype == torch.long
    assert bool(torch.all(probs.gather(-1, ids.unsqueeze(-1)) > 0))  # never a masked token
    assert sampler.pick(probs[0, 0]).shape == ()


def test_sampler_is_reproducible_from_its_generator():
    s = SamplingSettings()
    probs = torch.softmax(logits_from(7, (50, 6)), dim=-1)
    a = TokenSampler(s, torch.Generator().manual_seed(42)).pick(probs)
    b = TokenSampler(s, torch.Generator().manual_seed(42)).pick(probs)
    assert torch.equal(a, b)


def test_sampler_draws_from_its_probabilities():
    probs = torch.tensor([0.1, 0.0, 0.45, 0.25, 0.2])
    sampler = TokenSampler(SamplingSettings(), torch.Generator().manual_seed(11))
    n = 20_000
    ids = sampler.pick(probs.expand(n, -1))
    counts = torch.bincount(ids, minlength=5)
    assert counts[1] == 0
    support = probs > 0
    result = chisquare(counts[support].double().numpy(), (probs[support].double() * n).numpy())
    assert result.pvalue > 1e-3
