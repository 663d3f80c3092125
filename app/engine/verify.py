"""The three verification rules for one chain block (docs/ALGORITHMS.md §3 greedy, §4 sampling, §5 ASD).

Notation. The drafter proposed `K >= 0` tokens `x_0 .. x_{K-1}`. The target,
fed `[last committed, x_0 .. x_{K-1}]` in one pass, returned logits `z` of
shape (K+1, V): row `i < K` scores draft `x_i`, row `K` the token after the
block (the bonus). `p` are the target's (warped) probabilities, `q` the
drafter's, (K, V); `q = None` means a deterministic drafter (one-hot `q`).
Every rule returns one `Verdict`: `a = n_accepted` in 0..K, the one target token appended
after the accepted prefix: the correction at row `a` if `a < K`, the bonus at
row `K` if `a == K`. `K = 0` is plain decoding: `a = 0` and the target's own
choice at row 0. The verdict also carries the per-position numbers the rule decided
with (for the pass inspector); the fields of the other rules are None.

- greedy:  accept while `x_i == argmax z_i`; append `argmax z_a`.
- sample:  accept `x_i` iff `u_i <= min(1, p_i(x_i) / q_i(x_i))`; at the first
           rejection `n` draw from `norm(max(0, p_n - q_n))`; if all K are
           accepted draw the bonus from `p_K`. Lossless.
- ASD:     greedy, but a mismatch may be accepted when its regret is gated,
           capped and affordable within the request budget (see `verify_asd`).

All rules are vectorised over K (no Python loop); a prefix length is
`cumprod(ok).sum()`. `argmax` is torch's, which returns the first maximum.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from app.engine.exact import to_host_float64


@dataclass(frozen=True, eq=False)
class Verdict:
    """What every rule decides for one block, and the per-position numbers it decided with.

    Rule-specific fields are None under the other rules.
    """

    n_accepted: int  # a in 0..K
    next_token: int  # correction at row a (a < K) or bonus at row K (a == K)
    target_ids: Tensor  # (K+1,) long: argmax z_i (greedy, ASD) or argmax p_i (sample) per row
    accept_prob: Tensor | None = None  # sample: (K,) float32 min(1, p_i(x_i) / q_i(x_i)), p_i(x_i) for one-hot q
    u: Tensor | None = None  # sample: (K,) the uniform draws compared with accept_prob
    residual: Tensor | None = None  # sample: (V,) norm(max(0, p_n - q_n)) at the first rejection n; None if all kept
    regret: Tensor | None = None  # ASD: (K,) float64 on the host, r_i = max(0, z_i[y_i] - z_i[x_i])
    mismatch: Tensor | None = None  # ASD: (K,) bool on the host, x_i != y_i

    def is_exception(self, i: int) -> bool:
        """Whether draft i is a mismatch with the target's argmax that the rule accepted (ASD only)."""
        return self.mismatch is not None and i < self.n_accepted and bool(self.mismatch[i])


# ---------------------------------------------------------------- helpers


def _prefix_length(ok: Tensor) -> int:
    """Length of the leading run of True in a (K,) bool tensor.

    The scan runs in float32 (0/1 products are exact): MPS before macOS 13.3 has no int64 cumsum / cumprod.
    """
    return int(ok.float().cumprod(dim=0).sum())


def _check_block(draft_ids: Tensor, rows: Tensor, extra_rows: int, name: str) -> int:
    k = draft_ids.shape[0] if draft_ids.dim() == 1 else -1
    if k < 0 or rows.dim() != 2 or rows.shape[0] != k + extra_rows:
        raise ValueError(f"{name} must be ({'K+1' if extra_rows else 'K'}, V) for K = {k} drafts; "
                         f"got drafts {tuple(draft_ids.shape)} and {name} {tuple(rows.shape)}")
    return k


def _at(rows: Tensor, ids: Tensor) -> Tensor:
    """rows[i, ids[i]] for every i: (K, V), (K,) -> (K,)."""
    return rows.gather(1, ids.unsqueeze(1)).squeeze(1)


# ---------------------------------------------------------------- greedy


def verify_greedy(draft_ids: Tensor, target_logits: Tensor) -> Verdict:
    """Strict greedy verification (§3): output identical to greedy decoding."""
    k = _check_block(draft_ids, target_logits, 1, "target_logits")
    y = target_logits.argmax(dim=-1)  # (K+1,)
    a = _prefix_length(draft_ids.long() == y[:k])
    return Verdict(n_accepted=a, next_token=int(y[a]), target_ids=y)


# ---------------------------------------------------------------- sampling


def acceptance_probs(draft_ids: Tensor, p: Tensor, q: Tensor | None) -> Tensor:
    """min(1, p_i(x_i) / q_i(x_i)) per draft, (K,) float32.

    One-hot q (None): p_i(x_i). Guards: a token with p(x) = 0 is never
    accepted (0/0 is taken as 0, and the rule below also refuses u = 0);
    q(x) = 0 < p(x) gives p/q = inf, hence 1. So the value is 1 only when
    p(x) >= q(x) and p(x) > 0. A correctly sampled draft never has q(x) = 0.
    """
    x = draft_ids.long()  # (K,)
    p_x = _at(p[: x.shape[0]].float(), x)  # (K,)
    if q is None:
        return p_x
    ratio = p_x / _at(q.float(), x)  # (K,) inf where q = 0 < p, nan where 0/0
    return torch.where(p_x > 0, ratio.clamp(max=1.0), 0.0)


def residual_probs(p_row: Tensor, q_row: Tensor | None, x: int) -> Tensor:
    """norm(max(0, p - q)) over (V,); p with x zeroed for one-hot q; p itself if that is all 0."""
    p_row = p_row.float()  # (V,)
    if q_row is None:
        r = p_row.clone()
        r[x] = 0.0
    else:
        r = (p_row - q_row.float()).clamp(min=0.0)  # (V,)
    total = r.sum()
    if total <= 0:
        return p_row / p_row.sum()
    return r / total


def verify_sampling(draft_ids: Tensor, p: Tensor, q: Tensor | None, u: Tensor,
                    generator: torch.Generator) -> Verdict:
    """Lossless speculative sampling (§4.2, proof in §4.3); `p`, `q` warped identically.

    draft_ids (K,), p (K+1, V), q (K, V) or None for a deterministic drafter,
    u (K,) uniform draws. The committed tokens are distributed exactly as
    sampling from the target alone. `generator` must be on p's device.
    """
    k = _check_block(draft_ids, p, 1, "p")
    if q is not None and tuple(q.shape) != (k, p.shape[1]):
        raise ValueError(f"q must be (K, V) = {(k, p.shape[1])}; got {tuple(q.shape)}")
    if tuple(u.shape) != (k,):
        raise ValueError(f"u must be (K,) = ({k},); got {tuple(u.shape)}")
    accept_prob = acceptance_probs(draft_ids, p, q)  # (K,)
    a = _prefix_length((u <= accept_prob) & (accept_prob > 0))
    if a == k:
        residual, dist = None, p[k].float()  # bonus from p_K
    else:
        residual = residual_probs(p[a], None if q is None else q[a], int(draft_ids[a]))
        dist = residual
    next_token = int(torch.multinomial(dist, 1, generator=generator))
    return Verdict(n_accepted=a, next_token=next_token, target_ids=p.argmax(dim=-1), accept_prob=accept_prob, u=u,
                   residual=residual)


# ---------------------------------------------------------------- ASD


def verify_asd(draft_ids: Tensor, target_logits: Tensor, remaining: float, gate: float, cap: int) -> Verdict:
    """Approximate Speculative Decoding (§5), O(K) vectorised.

    With y_i = argmax z_i, r_i = max(0, z_i[y_i] - z_i[x_i]) (float64, on the host:
    the two logits per row are gathered on the device, then widened by `to_host_float64`),
    mis_i = x_i != y_i, suffix value v_i = K - i and C_i = sum_{j<=i} mis_j r_j,
    position i is feasible iff it is a match, or a mismatch with

        gate:    r_i / v_i <= g          (and g > 0, see below)
        cap:     sum_{j<=i} mis_j <= M
        budget:  C_{i-1} < rem  and  C_i <= rem,

    and a is the longest feasible prefix (later matches after a failing
    position are not reachable). `rem = B - s` is the request budget left at
    block start. g = 0 accepts no mismatch at all, not even a zero-regret
    tie, so that B = 0, g = 0 and M = 0 each reproduce `verify_greedy`
    exactly. Charge the ledger with `asd_charge` after clipping a.
    """
    k = _check_block(draft_ids, target_logits, 1, "target_logits")
    z = target_logits  # (K+1, V) on the device, in the logits' own dtype
    y = z.argmax(dim=-1)  # (K+1,) first maximum; widening to float64 keeps every value, hence the same argmax
    x = draft_ids.long().to(z.device)  # (K,)
    top_and_draft = torch.stack([_at(z[:k], y[:k]), _at(z[:k], x)], dim=1)  # (K, 2): top_i, z_i[x_i]
    top, z_x = to_host_float64(top_and_draft).unbind(dim=1)  # (K,), (K,) float64 on the host, exact
    y = y.cpu()  # (K+1,)
    regret = (top - z_x).clamp(min=0.0)  # (K,)
    mismatch = x.cpu() != y[:k]  # (K,)
    value = to_host_float64(torch.arange(k, 0, -1))  # (K,) = K, K-1, .., 1
    charged = torch.where(mismatch, regret, torch.zeros_like(regret))  # (K,)
    spent = charged.cumsum(dim=0)  # (K,) C_i
    spent_before = torch.cat([spent.new_zeros(1), spent[:-1]])  # (K,) C_{i-1}
    gated = (regret / value <= gate) if gate > 0 else torch.zeros_like(mismatch)
    capped = mismatch.long().cumsum(dim=0) <= cap
    affordable = (spent_before < remaining) & (spent <= remaining)
    ok = ~mismatch | (gated & capped & affordable)  # (K,)
    a = _prefix_length(ok)
    return Verdict(n_accepted=a, next_token=int(y[a]), target_ids=y, regret=regret, mismatch=mismatch)


def asd_charge(verdict: Verdict, n_committed: int) -> float:
    """Regret to add to the ledger: C_{n-1} = sum_{i < n} mis_i r_i for the clipped count n.

    Uses the same cumulative sum as `verify_asd`, so the charge of the
    unclipped count is exactly the C the affordability test compared with rem.
    """
    regret, mismatch = verdict.regret, verdict.mismatch
    if regret is None or mismatch is None:
        raise ValueError("asd_charge needs a verdict of verify_asd")
    n = min(n_committed, regret.shape[0])
    if n <= 0:
        return 0.0
    charged = torch.where(mismatch, regret, torch.zeros_like(regret))  # (K,)
    return float(charged.cumsum(dim=0)[n - 1])


# ---------------------------------------------------------------- what ASD bought (§5.6)


def strict_prefix_length(verdict: Verdict) -> int:
    """a_strict: the accepted length strict greedy (§3) gives on the same logits, the leading run of matches."""
    if verdict.mismatch is None:
        raise ValueError("strict_prefix_length needs a verdict of verify_asd")
    return _prefix_length(~verdict.mismatch)


def asd_saved(verdict: Verdict, n_committed: int) -> int:
    """Drafts ASD kept beyond strict greedy on the same logits: max(0, a' - a_strict) for the kept count a'.

    ASD accepts every match strict greedy accepts, so a >= a_strict, and position a_strict (if kept) is the
    first exception. saved = exceptions + reused within the kept prefix.
    """
    return max(0, min(n_committed, verdict.n_accepted) - strict_prefix_length(verdict))


def asd_reused(verdict: Verdict, n_committed: int) -> int:
    """Target-greedy drafts (matches) kept after the first kept exception: the realised-prefix suffix reuse.

    Positions a_strict + 1 .. a' - 1 that are matches; 0 when no exception was kept.
    """
    mismatch = verdict.mismatch
    if mismatch is None:
        raise ValueError("asd_reused needs a verdict of verify_asd")
    first, kept = strict_prefix_length(verdict), min(n_committed, verdict.n_accepted)
    if kept <= first + 1:
        return 0
    return int((~mismatch[first + 1: kept]).sum())
