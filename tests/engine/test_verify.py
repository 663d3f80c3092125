"""The three verification rules (docs/ALGORITHMS.md §3-§5) on explicit tensors."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare
from torch.utils._python_dispatch import TorchDispatchMode

from app.engine.core.sampling import TokenSampler
from app.engine.core.verify import (
    acceptance_probs,
    asd_charge,
    asd_reused,
    asd_saved,
    greedy_ruling,
    residual_probs,
    settle,
    strict_prefix_length,
    verify_asd,
    verify_greedy,
    verify_sampling,
)
from app.engine.settings import SamplingSettings

P_MIN = 1e-3  # chi-square p-value threshold; every sample below uses a fixed seed


def ids(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


def one_hot_rows(tokens: list[int], v: int, high: float = 5.0) -> torch.Tensor:
    """Logits whose row i has its unique maximum at tokens[i]."""
    z = torch.zeros(len(tokens), v)
    z[torch.arange(len(tokens)), torch.tensor(tokens)] = high
    return z


# ================================================================ greedy


def test_greedy_accepts_the_matching_prefix_then_corrects():
    z = one_hot_rows([3, 1, 2, 0], v=5)  # K = 3
    v = verify_greedy(ids(3, 1, 4), z)
    assert (v.n_accepted, v.next_token) == (2, 2)
    assert v.target_ids.tolist() == [3, 1, 2, 0]


def test_greedy_all_accepted_appends_the_bonus():
    z = one_hot_rows([3, 1, 2, 0], v=5)
    v = verify_greedy(ids(3, 1, 2), z)
    assert (v.n_accepted, v.next_token) == (3, 0)


def test_greedy_first_mismatch_stops_even_if_later_drafts_match():
    z = one_hot_rows([3, 1, 2, 0], v=5)
    v = verify_greedy(ids(4, 1, 2), z)
    assert (v.n_accepted, v.next_token) == (0, 3)


def test_greedy_k0_is_plain_decoding():
    z = one_hot_rows([2], v=4)
    v = verify_greedy(torch.empty(0, dtype=torch.long), z)
    assert (v.n_accepted, v.next_token) == (0, 2)
    assert v.target_ids.tolist() == [2]


def test_greedy_ties_resolve_to_the_first_maximum():
    z = torch.tensor([[0.0, 2.0, 2.0], [1.0, 1.0, 1.0]])
    assert verify_greedy(ids(2), z).n_accepted == 0
    v = verify_greedy(ids(1), z)
    assert (v.n_accepted, v.next_token) == (1, 0)


class NoIntegerScans(TorchDispatchMode):
    """Records cumsum / cumprod over integer tensors (MPS before macOS 13.3 has none)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.cumsum, torch.ops.aten.cumprod) and not args[0].is_floating_point():
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_greedy_and_sampling_scan_no_integer_tensor():
    z = one_hot_rows([3, 1, 2, 0], v=5)  # (K+1, V)
    p = torch.softmax(z, dim=-1)  # (K+1, V)
    with NoIntegerScans() as mode:
        verify_greedy(ids(3, 1, 4), z)
        verify_sampling(ids(3, 1, 4), p, None, torch.tensor([0.1, 0.2, 0.3]), torch.Generator().manual_seed(0))
    assert not mode.seen


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_greedy_accepts_half_precision_logits(dtype):
    z = one_hot_rows([1, 0, 2], v=3).to(dtype)
    v = verify_greedy(ids(1, 0), z)
    assert (v.n_accepted, v.next_token) == (2, 2)


def test_rules_reject_misshapen_blocks():
    with pytest.raises(ValueError):
        verify_greedy(ids(1, 2), torch.zeros(2, 4))
    with pytest.raises(ValueError):
        verify_asd(ids(1), torch.zeros(3, 4), 1.0, 0.25, 2)
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError):
        verify_sampling(ids(1), torch.full((2, 4), 0.25), torch.full((2, 4), 0.25), torch.zeros(1), gen)
    with pytest.raises(ValueError):
        verify_sampling(ids(1), torch.full((2, 4), 0.25), None, torch.zeros(2), gen)


# ================================================================ sampling: pieces


def test_accept_prob_is_min_one_p_over_q():
    p = torch.tensor([[0.1, 0.6, 0.3], [0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]])
    q = torch.tensor([[0.2, 0.3, 0.5], [0.5, 0.25, 0.25]])
    a = acceptance_probs(ids(0, 1), p, q)
    assert torch.allclose(a, torch.tensor([0.5, 1.0]))
    assert acceptance_probs(ids(1, 0), p, q).tolist() == [1.0, 1.0]  # p >= q
    assert torch.allclose(acceptance_probs(ids(2, 1), p, None), torch.tensor([0.3, 0.25]))  # one-hot q: p(x)


def test_accept_prob_guards_zero_probabilities():
    p = torch.tensor([[0.0, 0.7, 0.3], [0.2, 0.8, 0.0]])
    q = torch.tensor([[0.5, 0.0, 0.5]])
    # q(x) = 0 < p(x): p/q = inf -> 1
    assert acceptance_probs(ids(1), p, q).tolist() == [1.0]
    # p(x) = 0: never accepted, also for q(x) = 0 (0/0) and for u = 0
    p0 = torch.tensor([[0.0, 1.0, 0.0], [0.2, 0.8, 0.0]])
    q0 = torch.tensor([[0.0, 0.5, 0.5]])
    assert acceptance_probs(ids(0), p0, q0).tolist() == [0.0]
    gen = torch.Generator().manual_seed(0)
    v = verify_sampling(ids(0), p0, q0, torch.zeros(1), gen)
    assert v.n_accepted == 0 and v.next_token == 1
    v = verify_sampling(ids(0), p0, None, torch.zeros(1), gen)
    assert v.n_accepted == 0 and v.next_token == 1


def test_u_equal_to_accept_prob_accepts():
    p = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    q = torch.tensor([[0.5, 0.5]])
    gen = torch.Generator().manual_seed(0)
    assert verify_sampling(ids(0), p, q, torch.tensor([0.5]), gen).n_accepted == 1
    assert verify_sampling(ids(0), p, q, torch.tensor([0.5001]), gen).n_accepted == 0


def prob_vectors(v: int):
    return st.lists(st.floats(0.0, 1.0), min_size=v, max_size=v).filter(lambda w: sum(w) > 1e-3).map(
        lambda w: torch.tensor(w, dtype=torch.float32) / sum(w))


@settings(max_examples=30, deadline=None)
@given(data=st.data(), v=st.integers(2, 8))
def test_residual_sums_to_one_and_vanishes_where_q_covers_p(data, v):
    p = data.draw(prob_vectors(v))
    q = data.draw(prob_vectors(v))
    x = data.draw(st.integers(0, v - 1))
    r = residual_probs(p, q, x)
    assert r.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert torch.all(r >= 0)
    if torch.clamp(p - q, min=0).sum() > 1e-6:
        assert torch.all(r[q >= p] == 0)
        assert torch.allclose(r, torch.clamp(p - q, min=0) / torch.clamp(p - q, min=0).sum(), atol=1e-6)
    # one-hot q: p with x zeroed, renormalised (or p itself when p is all on x)
    r1 = residual_probs(p, None, x)
    assert r1.sum().item() == pytest.approx(1.0, abs=1e-5)
    if p[x] < 1 - 1e-6:
        assert r1[x] == 0
        rest = torch.arange(v) != x
        assert torch.allclose(r1[rest], p[rest] / p[rest].sum(), atol=1e-5)


def test_residual_falls_back_to_p_when_it_sums_to_zero():
    p = torch.tensor([0.2, 0.3, 0.5])
    assert torch.equal(residual_probs(p, p.clone(), 1), p)
    point = torch.tensor([0.0, 1.0, 0.0])
    assert torch.equal(residual_probs(point, None, 1), point)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), v=st.integers(2, 7), deterministic=st.booleans())
def test_rule_is_lossless_exactly(data, v, deterministic):
    """sum_x q(x) [a(x) 1{t = x} + (1 - a(x)) residual_x(t)] == p(t), with the module's own pieces."""
    p = data.draw(prob_vectors(v))
    q = data.draw(prob_vectors(v))
    if deterministic:
        x = data.draw(st.integers(0, v - 1))
        q = torch.nn.functional.one_hot(torch.tensor(x), v).float()
    out = torch.zeros(v, dtype=torch.float64)
    p_rows = torch.stack([p, p])  # (K+1, V) with K = 1
    for x in range(v):
        if q[x] == 0:
            continue
        a = float(acceptance_probs(ids(x), p_rows, None if deterministic else q[None])[0])
        out[x] += q[x].item() * a
        out += q[x].item() * (1 - a) * residual_probs(p, None if deterministic else q, x).double()
    assert torch.allclose(out, p.double(), atol=1e-5)


def test_all_accepted_samples_the_bonus_and_has_no_residual():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    gen = torch.Generator().manual_seed(0)
    v = verify_sampling(ids(1, 2), p, None, torch.tensor([0.99, 0.5]), gen)
    assert (v.n_accepted, v.next_token, v.residual) == (2, 0, None)
    assert v.accept_prob.tolist() == [1.0, 1.0]


def test_sampling_k0_draws_from_p0():
    p = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    gen = torch.Generator().manual_seed(0)
    v = verify_sampling(torch.empty(0, dtype=torch.long), p, torch.empty(0, 4), torch.empty(0), gen)
    assert (v.n_accepted, v.next_token, v.residual) == (0, 2, None)
    assert v.accept_prob.shape == (0,)


def test_rejection_reports_the_residual_of_that_row():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.1, 0.2, 0.7], [1 / 3, 1 / 3, 1 / 3]])
    q = torch.tensor([[0.5, 0.5, 0.0], [0.6, 0.2, 0.2]])
    gen = torch.Generator().manual_seed(0)
    v = verify_sampling(ids(0, 0), p, q, torch.tensor([0.3, 0.9]), gen)
    assert v.n_accepted == 1
    assert torch.allclose(v.residual, torch.tensor([0.0, 0.0, 1.0]))
    assert v.next_token == 2


# ================================================================ sampling: chi-square


def wrong_rule(draft_ids, p, q, u, generator):
    """Deliberately wrong: the correction is drawn from p_n instead of the residual."""
    v = verify_sampling(draft_ids, p, q, u, generator)
    if v.residual is None:
        return v
    return replace(v, next_token=int(torch.multinomial(p[v.n_accepted], 1, generator=generator)))


def fit_pvalue(counts: torch.Tensor, expected: torch.Tensor) -> float:
    """Chi-square p-value of counts against a distribution; cells of probability 0 must be empty."""
    expected = expected.double() / expected.double().sum()
    support = expected > 0
    assert counts[~support].sum() == 0, f"sampled a token of probability 0: {counts.tolist()}"
    n = counts.sum().item()
    return chisquare(counts[support].double().numpy(), (expected[support] * n).numpy()).pvalue


def first_token_counts(rule, p0, q0, fixed_draft, n, seed):
    """Run one K=1 block per sample (x ~ q0, or the fixed draft of a deterministic drafter)."""
    gen = torch.Generator().manual_seed(seed)
    v = p0.shape[0]
    drafts = (torch.full((n,), fixed_draft) if q0 is None
              else torch.multinomial(q0, n, replacement=True, generator=gen))  # (n,)
    u = torch.rand(n, generator=gen)
    p = torch.stack([p0, torch.full((v,), 1 / v)])  # (2, V): row 1 is the bonus row
    q = None if q0 is None else q0[None]
    counts = torch.zeros(v, dtype=torch.long)
    for i in range(n):
        verdict = rule(drafts[i : i + 1], p, q, u[i : i + 1], gen)
        counts[int(drafts[i]) if verdict.n_accepted else verdict.next_token] += 1
    return counts


P0 = torch.tensor([0.05, 0.4, 0.3, 0.15, 0.1])
SCENARIOS = {
    "general_q": (P0, torch.tensor([0.4, 0.1, 0.1, 0.2, 0.2]), None),
    "one_hot_q": (P0, None, 1),
    "one_hot_q_on_p_zero": (torch.tensor([0.0, 0.5, 0.3, 0.2, 0.0]), None, 0),
    "q_equals_p": (P0, P0.clone(), None),
    "q_disjoint_from_p": (torch.tensor([0.5, 0.3, 0.2, 0.0, 0.0]), torch.tensor([0.0, 0.0, 0.0, 0.6, 0.4]), None),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_first_committed_token_is_distributed_as_p(name):
    p0, q0, fixed = SCENARIOS[name]
    counts = first_token_counts(verify_sampling, p0, q0, fixed, n=1000, seed=1234)
    assert fit_pvalue(counts, p0) > P_MIN


@pytest.mark.parametrize("name", ["general_q", "one_hot_q"])
def test_the_chi_square_test_rejects_a_wrong_rule(name):
    p0, q0, fixed = SCENARIOS[name]
    counts = first_token_counts(wrong_rule, p0, q0, fixed, n=1000, seed=1234)
    assert fit_pvalue(counts, p0) < P_MIN


@pytest.mark.parametrize("sampling", [
    SamplingSettings(temperature=0.7, top_k=4),
    SamplingSettings(temperature=1.3, top_p=0.8),
    SamplingSettings(temperature=0.9, top_k=5, top_p=0.85),
])
def test_lossless_with_the_same_warping_on_both_sides(sampling):
    target_logits = torch.tensor([1.0, 2.2, 0.3, 1.7, -0.5, 0.9, 1.2])
    drafter_logits = torch.tensor([2.0, 0.1, 1.1, 1.8, 0.7, -1.0, 0.4])
    sampler = TokenSampler(sampling, torch.Generator().manual_seed(0))
    p0, q0 = sampler.probs(target_logits), sampler.probs(drafter_logits)
    assert (p0 == 0).any() and (q0 == 0).any()  # the warping really masks tokens
    counts = first_token_counts(verify_sampling, p0, q0, None, n=1000, seed=99)
    assert fit_pvalue(counts, p0) > P_MIN


# Joint distribution of the first two committed tokens: p(t0, t1) = p0(t0) p1(t1 | t0).
V2 = 4
JP0 = torch.tensor([0.1, 0.4, 0.2, 0.3])
JP1 = torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4], [0.05, 0.05, 0.6, 0.3]])
JQ0 = torch.tensor([0.4, 0.1, 0.4, 0.1])
JQ1 = torch.tensor([[0.1, 0.6, 0.2, 0.1], [0.4, 0.1, 0.1, 0.4], [0.25, 0.25, 0.25, 0.25], [0.3, 0.3, 0.1, 0.3]])
UNIFORM = torch.full((V2,), 1 / V2)


def first_two_counts(rule, deterministic: bool, n: int, seed: int) -> torch.Tensor:
    """K=2 block; when it commits one token only, a second K=1 pass supplies the next one.

    Drafts are pre-drawn for every possible context c (column c of a table) so
    the loop only runs the rule; the deterministic drafter proposes 1, then c+2.
    """
    gen = torch.Generator().manual_seed(seed)
    if deterministic:
        x0s = torch.ones(n, dtype=torch.long)
        next_draft = ((torch.arange(V2) + 2) % V2).expand(n, V2)  # (n, V)
        next_draft_2 = next_draft
    else:
        x0s = torch.multinomial(JQ0, n, replacement=True, generator=gen)  # (n,)
        next_draft = torch.multinomial(JQ1, n, replacement=True, generator=gen).T  # (n, V): x1 ~ q1(. | c)
        next_draft_2 = torch.multinomial(JQ1, n, replacement=True, generator=gen).T
    us = torch.rand(n, 3, generator=gen)
    block_p = [torch.stack([JP0, JP1[c], UNIFORM]) for c in range(V2)]  # (3, V) per x0
    block_q = [None if deterministic else torch.stack([JQ0, JQ1[c]]) for c in range(V2)]  # (2, V)
    pass2_p = [torch.stack([JP1[c], UNIFORM]) for c in range(V2)]  # (2, V) per t0
    pass2_q = [None if deterministic else JQ1[c][None] for c in range(V2)]  # (1, V)
    counts = torch.zeros(V2, V2, dtype=torch.long)
    for i in range(n):
        x0 = int(x0s[i])
        x1 = int(next_draft[i, x0])
        v = rule(ids(x0, x1), block_p[x0], block_q[x0], us[i, :2], gen)
        if v.n_accepted >= 1:
            t0, t1 = x0, (x1 if v.n_accepted == 2 else v.next_token)
        else:
            t0 = v.next_token
            x = int(next_draft_2[i, t0])
            w = rule(ids(x), pass2_p[t0], pass2_q[t0], us[i, 2:], gen)
            t1 = x if w.n_accepted else w.next_token
        counts[t0, t1] += 1
    return counts.flatten()


@pytest.mark.parametrize("deterministic", [False, True])
def test_joint_distribution_of_two_committed_tokens(deterministic):
    expected = (JP0[:, None] * JP1).flatten()
    counts = first_two_counts(verify_sampling, deterministic, n=1000, seed=7)
    assert fit_pvalue(counts, expected) > P_MIN
    wrong = first_two_counts(wrong_rule, deterministic, n=1000, seed=7)
    assert fit_pvalue(wrong, expected) < P_MIN


# ================================================================ ASD: explicit cases


def tie_logits(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def test_asd_accepts_a_zero_regret_tie_while_budget_remains():
    z = tie_logits([[2.0, 2.0, 0.0], [0.0, 0.0, 1.0]])  # row 0: tokens 0 and 1 tie, y_0 = 0
    v = verify_asd(ids(1), z, remaining=0.5, gate=0.25, cap=2)
    assert v.mismatch.tolist() == [True] and v.regret.tolist() == [0.0]
    assert (v.n_accepted, v.next_token) == (1, 2)
    assert asd_charge(v, 1) == 0.0


def test_asd_refuses_a_zero_regret_tie_once_rem_is_exhausted():
    z = tie_logits([[2.0, 2.0, 0.0], [0.0, 0.0, 1.0]])
    v = verify_asd(ids(1), z, remaining=0.0, gate=0.25, cap=2)
    g = verify_greedy(ids(1), z)
    assert (v.n_accepted, v.next_token) == (g.n_accepted, g.next_token) == (0, 0)


def test_asd_exhausting_the_budget_inside_a_block_blocks_a_later_tie():
    # x_0 costs exactly rem (C_0 = rem); the tie at x_1 then fails C_0 < rem.
    z = tie_logits([[1.0, 0.5, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # K = 2
    v = verify_asd(ids(1, 1), z, remaining=0.5, gate=0.25, cap=2)  # r_0 / q_0 = 0.5 / 2 = 0.25 <= g
    assert v.regret.tolist() == [0.5, 0.0]
    assert (v.n_accepted, v.next_token) == (1, 0)
    assert asd_charge(v, v.n_accepted) == 0.5


def test_asd_first_maximum_decides_the_target_token():
    z = tie_logits([[0.0, 3.0, 3.0], [1.0, 0.0, 0.0]])
    assert verify_asd(ids(1), z, 0.0, 0.25, 2).target_ids.tolist() == [1, 0]
    match = verify_asd(ids(1), z, 0.0, 0.25, 2)  # x = y: a free match, even at rem = 0
    assert (match.n_accepted, bool(match.mismatch[0])) == (1, False)
    tie = verify_asd(ids(2), z, 0.0, 0.25, 2)  # the other maximum is a (zero-regret) mismatch
    assert (tie.n_accepted, bool(tie.mismatch[0]), tie.next_token) == (0, True, 1)


def test_asd_later_exact_matches_after_a_failing_position_are_unreachable():
    z = one_hot_rows([0, 1, 2, 3], v=4)  # regret of any mismatch is 5
    v = verify_asd(ids(3, 1, 2), z, remaining=100.0, gate=1.0, cap=3)  # 5 / 3 > 1
    assert (v.n_accepted, v.next_token) == (0, 0)


def test_asd_suffix_value_is_k_minus_i():
    # regret 0.9 on a block of K = 4: 0.9/4 passes g = 0.25 at i = 0, 0.9/1 fails at i = 3
    z = torch.zeros(5, 3)
    z[:, 0] = 0.9
    early = verify_asd(ids(1, 0, 0, 0), z, remaining=10.0, gate=0.25, cap=2)
    late = verify_asd(ids(0, 0, 0, 1), z, remaining=10.0, gate=0.25, cap=2)
    assert early.n_accepted == 4
    assert late.n_accepted == 3
    assert asd_charge(early, 4) == pytest.approx(0.9)


def test_asd_block_cap_counts_mismatches():
    z = torch.zeros(4, 3)
    z[:, 0] = 0.1
    v = verify_asd(ids(1, 2, 1), z, remaining=10.0, gate=1.0, cap=2)
    assert v.n_accepted == 2 and v.next_token == 0
    assert verify_asd(ids(1, 0, 2), z, remaining=10.0, gate=1.0, cap=1).n_accepted == 2  # the match is free
    assert verify_asd(ids(1, 2, 0), z, remaining=10.0, gate=1.0, cap=1).n_accepted == 1


def test_asd_charge_takes_the_clipped_count():
    z = torch.zeros(5, 3)
    z[:, 0] = 0.25
    v = verify_asd(ids(1, 0, 2, 0), z, remaining=10.0, gate=1.0, cap=2)
    assert v.n_accepted == 4
    assert [asd_charge(v, n) for n in range(5)] == [0.0, 0.25, 0.25, 0.5, 0.5]


def test_asd_k0_is_plain_greedy():
    v = verify_asd(torch.empty(0, dtype=torch.long), one_hot_rows([2], v=3), 5.0, 0.25, 2)
    assert (v.n_accepted, v.next_token, asd_charge(v, 0)) == (0, 2, 0.0)
    assert v.regret.dtype == torch.float64 and v.regret.shape == (0,)


def test_asd_half_precision_logits_match_float64():
    z = torch.randn(6, 9, generator=torch.Generator().manual_seed(3)).to(torch.float16)
    x = ids(*z[:5].float().topk(2).indices[:, 1].tolist())  # every draft the runner-up
    a = verify_asd(x, z, 3.0, 1.0, 4)
    b = verify_asd(x, z.double(), 3.0, 1.0, 4)
    assert (a.n_accepted, a.next_token) == (b.n_accepted, b.next_token)
    assert torch.equal(a.regret, b.regret)


# ================================================================ ASD: properties


def brute_force_asd(x: list[int], z: torch.Tensor, rem: float, g: float, cap: int) -> int:
    """Longest feasible prefix, a plain loop written from docs/ALGORITHMS.md §5.3."""
    k = len(x)
    spent, mismatches, accepted = 0.0, 0, 0
    for i in range(k):
        row = z[i].double().tolist()
        top = max(row)
        y = row.index(top)  # first maximum
        if x[i] != y:
            regret = max(0.0, top - row[x[i]])
            before, spent = spent, spent + regret
            mismatches += 1
            gated = g > 0 and regret / (k - i) <= g
            if not (gated and mismatches <= cap and before < rem and spent <= rem):
                break
        accepted = i + 1
    return accepted


@st.composite
def asd_blocks(draw):
    k = draw(st.integers(1, 8))
    v = draw(st.integers(2, 6))
    if draw(st.booleans()):  # coarse grid: many ties and exact budget boundaries
        z = torch.tensor(draw(st.lists(st.integers(-4, 4), min_size=(k + 1) * v, max_size=(k + 1) * v)),
                         dtype=torch.float32).reshape(k + 1, v) * 0.25
        rem = draw(st.integers(0, 12)) * 0.25
    else:
        z = torch.randn(k + 1, v, generator=torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1))))
        rem = draw(st.floats(0.0, 6.0))
    y = z.argmax(-1)
    x = [int(y[i]) if draw(st.floats(0, 1)) < 0.6 else draw(st.integers(0, v - 1)) for i in range(k)]
    g = draw(st.sampled_from([0.0, 0.05, 0.125, 0.25, 0.5, 1.0, 4.0]))
    cap = draw(st.integers(0, 4))
    return ids(*x), z, rem, g, cap


@settings(max_examples=100, deadline=None)
@given(block=asd_blocks())
def test_asd_properties(block):
    x, z, rem, g, cap = block
    k = x.shape[0]
    v = verify_asd(x, z, rem, g, cap)
    a = v.n_accepted
    assert a == brute_force_asd(x.tolist(), z, rem, g, cap)
    assert v.next_token == int(z[a].argmax())
    assert v.target_ids.tolist() == z.argmax(-1).tolist()
    accepted_mismatch = v.mismatch[:a]
    assert int(accepted_mismatch.sum()) <= cap
    value = torch.arange(k, 0, -1, dtype=torch.float64)[:a]
    assert bool(torch.all(v.regret[:a][accepted_mismatch] / value[accepted_mismatch] <= g))
    charges = [asd_charge(v, n) for n in range(a + 1)]  # any clipping point
    assert all(c <= rem for c in charges)
    assert charges == sorted(charges)
    assert charges[-1] == pytest.approx(float((v.regret * v.mismatch)[:a].sum()), abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(block=asd_blocks(), which=st.sampled_from(["B", "g", "M"]))
def test_asd_with_a_zero_knob_is_strict_greedy(block, which):
    x, z, rem, g, cap = block
    rem, g, cap = (0.0 if which == "B" else rem), (0.0 if which == "g" else g), (0 if which == "M" else cap)
    v = verify_asd(x, z, rem, g, cap)
    ref = verify_greedy(x, z)
    assert (v.n_accepted, v.next_token) == (ref.n_accepted, ref.next_token)
    assert torch.equal(v.target_ids, ref.target_ids)
    assert asd_charge(v, v.n_accepted) == 0.0



# ================================================================ ASD: what it bought (§5.6)


def test_asd_reused_and_saved_on_hand_worked_logits():
    # Every row's argmax is token 0 at 0.25, so each mismatch has regret 0.25; K = 6, g = 1, M = 2.
    z = torch.zeros(7, 3)
    z[:, 0] = 0.25
    v = verify_asd(ids(0, 1, 0, 0, 2, 0), z, remaining=10.0, gate=1.0, cap=2)
    # strict greedy stops at the mismatch at 1; ASD accepts both exceptions (1 and 4) and every match.
    assert (strict_prefix_length(v), v.n_accepted) == (1, 6)
    assert asd_saved(v, 6) == 5  # 6 kept - 1 strict
    assert asd_reused(v, 6) == 3  # matches at 2, 3 and 5, after the first exception at 1
    assert asd_saved(v, 6) == sum(v.is_exception(i) for i in range(6)) + asd_reused(v, 6)
    # Clipped at a' kept drafts: only the kept prefix counts.
    assert [asd_saved(v, n) for n in range(7)] == [0, 0, 1, 2, 3, 4, 5]
    assert [asd_reused(v, n) for n in range(7)] == [0, 0, 0, 1, 2, 2, 3]


def test_asd_an_exception_at_the_end_of_the_block_reuses_nothing():
    z = torch.zeros(4, 3)
    z[:, 0] = 0.1
    v = verify_asd(ids(0, 0, 1), z, remaining=10.0, gate=1.0, cap=2)
    assert (v.n_accepted, asd_saved(v, 3), asd_reused(v, 3)) == (3, 1, 0)


@pytest.mark.parametrize("knob", ["B", "g", "M"])
def test_asd_with_a_zero_knob_saves_and_reuses_nothing(knob):
    z = torch.zeros(7, 3)
    z[:, 0] = 0.25
    rem, gate, cap = (0.0 if knob == "B" else 10.0), (0.0 if knob == "g" else 1.0), (0 if knob == "M" else 2)
    v = verify_asd(ids(0, 1, 0, 0, 2, 0), z, rem, gate, cap)
    assert v.n_accepted == strict_prefix_length(v) == 1
    assert (asd_saved(v, 6), asd_reused(v, 6)) == (0, 0)


def test_reuse_figures_need_an_asd_verdict():
    v = verify_greedy(ids(0), one_hot_rows([0, 1], v=3))
    with pytest.raises(ValueError, match="verify_asd"):
        asd_saved(v, 1)
    with pytest.raises(ValueError, match="verify_asd"):
        asd_reused(v, 1)


@settings(max_examples=60, deadline=None)
@given(block=asd_blocks())
def test_asd_saved_is_exceptions_plus_reused(block):
    x, z, rem, g, cap = block
    v = verify_asd(x, z, rem, g, cap)
    strict = verify_greedy(x, z).n_accepted
    for kept in range(v.n_accepted + 1):
        exceptions = sum(v.is_exception(i) for i in range(kept))
        assert asd_saved(v, kept) == max(0, kept - strict) == exceptions + asd_reused(v, kept)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(0, 5), ties=st.integers(1, 12))
def test_the_greedy_rule_reading_the_top_entries_decides_as_argmax(seed, k, ties):
    """With the inspector's top entries found in the same search, the verdict is torch's argmax's, ties included:
    a row whose maximum repeats fewer times than the top holds, and one where it repeats more (read apart)."""
    gen = torch.Generator().manual_seed(seed)
    v, top = 300, 8
    logits = torch.randint(-3, 3, (k + 1, v), generator=gen).float()  # many equal values
    tied_at = torch.randperm(v, generator=gen)[:ties]
    logits[:, tied_at] = 5.0  # the maximum, `ties` times per row
    drafts = torch.where(torch.rand(k, generator=gen) < 0.7, logits[:k].argmax(-1),
                         torch.randint(0, v, (k,), generator=gen))
    plain, fused = greedy_ruling(drafts, logits), greedy_ruling(drafts, logits, top=top)
    expected, got = settle(plain), settle(fused)
    assert torch.equal(got.target_ids, logits.argmax(-1)) and torch.equal(got.target_ids, expected.target_ids)
    assert (got.n_accepted, got.next_token) == (expected.n_accepted, expected.next_token)
    assert fused.top_ids is not None and fused.top_ids.shape == (k + 1, top)
    assert torch.equal(logits.gather(1, fused.top_ids), logits.topk(top, dim=-1).values)
