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

The device work is vectorised over K (no Python loop); a prefix length there is
`cumprod(ok).sum()`. `argmax` is torch's, which returns the first maximum.

A rule runs in two steps, so that a pass waits for the device once: `*_ruling` queues
the device work (nothing is read back; the sampling rule even draws its token there)
and names the tensors the host needs; the pass reads them with `fetch`, together with
what its event shows, in one transfer; `Ruling.finish` decides the rest on the host
(the greedy prefix, ASD's float64 ledger) and returns the `Verdict`. `verify_*` do both
steps for a caller that wants the verdict at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from app.engine.core import rowwise
from app.engine.core.exact import to_host_float64


@dataclass(frozen=True, eq=False)
class Verdict:
    """What every rule decides for one block, and the per-position numbers it decided with.

    Rule-specific fields are None under the other rules. Every tensor is on the host except `residual`,
    which stays where it was computed (the pass reads only the inspector's entries of it).
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


@dataclass(frozen=True, eq=False)
class Rejection:
    """Where the sampling rule drew its correction: the row of the first rejection (row K-1 when every draft
    was accepted, then unused), the token drawn and the residual it was drawn from, all on the device."""

    row: Tensor  # (1,) long: min(a, K-1)
    token: Tensor  # (1,) long: the appended token
    residual: Tensor  # (V,) float32: norm(max(0, p_row - q_row))


@dataclass(frozen=True, eq=False)
class Ruling:
    """A rule's decision as far as the device takes it: what the host must read, and how it finishes.

    `candidates` (K+1,) long on the device holds, for each row i, the token the pass appends when it stops
    at row i (the inspector reads its p without waiting for a); only row a counts.
    """

    reads: dict[str, Tensor]  # device tensors `finish` needs, by name
    finish: Callable[[Mapping[str, Tensor]], Verdict]  # their host copies -> the verdict
    candidates: Tensor
    rejection: Rejection | None = None  # sample with K > 0 only
    top_ids: Tensor | None = None  # greedy with `top`: (K+1, top) long, each row's largest logits first


def settle(ruling: Ruling) -> Verdict:
    """The verdict of a ruling, read back on its own (the pass reads it together with its event's numbers)."""
    return ruling.finish(fetch(ruling.reads))


# ---------------------------------------------------------------- reading back


def fetch(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """`tensors` on the host, in one transfer: a pass's one wait for the device.

    Tensors already on the CPU come back as they are; the others travel together (see `read_packed`).
    """
    remote = {name: t for name, t in tensors.items() if not t.is_cpu}
    if not remote:
        return dict(tensors)
    copied = read_packed(remote)
    return {name: copied.get(name, t) for name, t in tensors.items()}


def read_packed(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Copy `tensors` to the host as one int32 buffer: one device-to-host copy instead of one per tensor.

    Floating tensors travel as the bits of their float32 values (exact for float16 and bfloat16; nothing
    on a device is float64) and come back float32; integers and booleans travel as int32 (token ids,
    counts and flags all fit) and come back int64 and bool. Shapes are kept.
    """
    words = torch.cat([_as_words(t) for t in tensors.values()]).cpu()  # (sum of numels,) int32
    host, offset = {}, 0
    for name, t in tensors.items():
        piece = words[offset: offset + t.numel()]
        offset += t.numel()
        if t.is_floating_point():
            piece = piece.view(torch.float32)
        else:
            piece = piece.bool() if t.dtype == torch.bool else piece.long()
        host[name] = piece.reshape(t.shape)
    return host


def _as_words(t: Tensor) -> Tensor:
    flat = t.reshape(-1)
    if t.is_floating_point():
        return flat.float().contiguous().view(torch.int32)
    return flat.to(torch.int32)


# ---------------------------------------------------------------- helpers


def _prefix_length(ok: Tensor) -> int:
    """Length of the leading run of True in a (K,) bool tensor on the host."""
    return int(_prefix_length_on_device(ok))


def _prefix_length_on_device(ok: Tensor) -> Tensor:
    """Length of the leading run of True in a (K,) bool tensor, as a () long tensor where `ok` lives.

    The scan runs in float32 (0/1 products are exact): MPS before macOS 13.3 has no int64 cumsum / cumprod.
    """
    return ok.float().cumprod(dim=0).sum().long()


def _leading_matches(drafts: list[int], targets: list[int]) -> int:
    """How many drafts equal the target's token at their row, counted from the first; targets has a row more."""
    return next((i for i, (x, y) in enumerate(zip(drafts, targets[: len(drafts)], strict=True)) if x != y),
                len(drafts))


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
    return settle(greedy_ruling(draft_ids, target_logits))


def greedy_ruling(draft_ids: Tensor, target_logits: Tensor, top: int = 1) -> Ruling:
    """§3 on the device: the target's argmax per row; the host counts the leading matches.

    With `top` >= 2 the ids of each row's `top` largest logits come along (`Ruling.top_ids`, for the pass
    inspector), and the argmax is read off them: one search of the vocabulary instead of two. A row whose
    maximum is not unique is searched again on the host (rare; torch's argmax takes the first of them).
    """
    _check_block(draft_ids, target_logits, 1, "target_logits")
    if top < 2:
        y = rowwise.argmax(target_logits)  # (K+1,)
        return Ruling({"target_ids": y, "drafts": draft_ids}, partial(_greedy_finish, None), candidates=y)
    values, ids = rowwise.topk(target_logits, top)  # (K+1, top), largest first
    y = ids[:, 0]  # (K+1,)
    reads = {"target_ids": y, "drafts": draft_ids, "tied": values[:, 0] == values[:, 1]}
    return Ruling(reads, partial(_greedy_finish, target_logits), candidates=y, top_ids=ids)


def _greedy_finish(target_logits: Tensor | None, host: Mapping[str, Tensor]) -> Verdict:
    targets = host["target_ids"].tolist()  # (K+1,)
    if "tied" in host and any(host["tied"].tolist()):
        assert target_logits is not None, "a ruling that reads ties keeps its logits"
        targets = [int(rowwise.argmax(target_logits[i])) if tied else token
                   for i, (token, tied) in enumerate(zip(targets, host["tied"].tolist(), strict=True))]
    a = _leading_matches(host["drafts"].tolist(), targets)
    return Verdict(n_accepted=a, next_token=targets[a], target_ids=torch.tensor(targets))


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


def residual_probs(p_row: Tensor, q_row: Tensor | None, x: int | Tensor) -> Tensor:
    """norm(max(0, p - q)) over (V,); p with x zeroed for one-hot q; p itself if that is all 0.

    `x` may be a (1,) long tensor on p's device: nothing is read back.
    """
    p_row = p_row.float()  # (V,)
    if q_row is None:
        x = torch.as_tensor(x, device=p_row.device).reshape(1)  # (1,)
        r = p_row.scatter(0, x, 0.0)
    else:
        r = (p_row - q_row.float()).clamp(min=0.0)  # (V,)
    total = r.sum()
    return torch.where(total > 0, r / total, p_row / p_row.sum())  # the fallback without a branch on the host


def verify_sampling(draft_ids: Tensor, p: Tensor, q: Tensor | None, u: Tensor,
                    generator: torch.Generator) -> Verdict:
    """Lossless speculative sampling (§4.2, proof in §4.3); `p`, `q` warped identically.

    draft_ids (K,), p (K+1, V), q (K, V) or None for a deterministic drafter,
    u (K,) uniform draws. The committed tokens are distributed exactly as
    sampling from the target alone. `generator` must be on p's device.
    """
    return settle(sampling_ruling(draft_ids, p, q, u, generator))


def sampling_ruling(draft_ids: Tensor, p: Tensor, q: Tensor | None, u: Tensor, generator: torch.Generator) -> Ruling:
    """§4.2 on the device, the draw included: the correction comes from the residual of row min(a, K-1),
    the bonus from p_K, chosen by `where` on the device's a, so nothing waits for the host."""
    k = _check_block(draft_ids, p, 1, "p")
    if q is not None and tuple(q.shape) != (k, p.shape[1]):
        raise ValueError(f"q must be (K, V) = {(k, p.shape[1])}; got {tuple(q.shape)}")
    if tuple(u.shape) != (k,):
        raise ValueError(f"u must be (K,) = ({k},); got {tuple(u.shape)}")
    x = draft_ids.long().to(p.device)  # (K,)
    accept_prob = acceptance_probs(x, p, q)  # (K,)
    a = _prefix_length_on_device((u <= accept_prob) & (accept_prob > 0))  # ()
    dist = p[k].float()  # (V,) bonus from p_K
    row = residual = None
    if k:
        row = a.clamp(max=k - 1).reshape(1)  # (1,) the first rejected row when there is one
        residual = residual_probs(p.index_select(0, row)[0], None if q is None else q.index_select(0, row)[0],
                                  x.index_select(0, row))  # (V,)
        dist = torch.where(a == k, dist, residual)
    next_token = torch.multinomial(dist, 1, generator=generator)  # (1,)
    target_ids = rowwise.argmax(p)  # (K+1,)
    rejection = None if row is None or residual is None else Rejection(row, next_token, residual)

    def finish(host: Mapping[str, Tensor]) -> Verdict:
        n = int(host["n_accepted"])
        return Verdict(n_accepted=n, next_token=int(host["next_token"][0]), target_ids=host["target_ids"],
                       accept_prob=host["accept_prob"], u=host["u"],
                       residual=rejection.residual if rejection is not None and n < k else None)

    reads = {"n_accepted": a, "next_token": next_token, "target_ids": target_ids, "accept_prob": accept_prob, "u": u}
    return Ruling(reads, finish, candidates=target_ids.scatter(0, a.reshape(1), next_token), rejection=rejection)


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
    return settle(asd_ruling(draft_ids, target_logits, remaining, gate, cap))


def asd_ruling(draft_ids: Tensor, target_logits: Tensor, remaining: float, gate: float, cap: int) -> Ruling:
    """§5 in two steps: the device gathers y and the two logits per row; the host decides in float64."""
    k = _check_block(draft_ids, target_logits, 1, "target_logits")
    z = target_logits  # (K+1, V) on the device, in the logits' own dtype
    y = rowwise.argmax(z)  # (K+1,) first maximum; widening to float64 keeps every value, hence the same argmax
    x = draft_ids.long().to(z.device)  # (K,)
    top_and_draft = torch.stack([_at(z[:k], y[:k]), _at(z[:k], x)], dim=1)  # (K, 2): top_i, z_i[x_i]

    def finish(host: Mapping[str, Tensor]) -> Verdict:
        top, z_x = to_host_float64(host["top_and_draft"]).unbind(dim=1)  # (K,), (K,) float64 on the host, exact
        targets = host["target_ids"]  # (K+1,)
        regret = (top - z_x).clamp(min=0.0)  # (K,)
        mismatch = host["drafts"] != targets[:k]  # (K,)
        value = to_host_float64(torch.arange(k, 0, -1))  # (K,) = K, K-1, .., 1
        charged = torch.where(mismatch, regret, torch.zeros_like(regret))  # (K,)
        spent = charged.cumsum(dim=0)  # (K,) C_i
        spent_before = torch.cat([spent.new_zeros(1), spent[:-1]])  # (K,) C_{i-1}
        gated = (regret / value <= gate) if gate > 0 else torch.zeros_like(mismatch)
        capped = mismatch.long().cumsum(dim=0) <= cap
        affordable = (spent_before < remaining) & (spent <= remaining)
        ok = ~mismatch | (gated & capped & affordable)  # (K,)
        a = _prefix_length(ok)
        return Verdict(n_accepted=a, next_token=int(targets[a]), target_ids=targets, regret=regret, mismatch=mismatch)

    return Ruling({"target_ids": y, "top_and_draft": top_and_draft, "drafts": x}, finish, candidates=y)


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
