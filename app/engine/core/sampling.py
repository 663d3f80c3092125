"""Turning logits into the distributions tokens are drawn from.

Notation (docs/ALGORITHMS.md §1, warping §4.1): `z` are logits over a vocabulary of size `V`, `p`
the target's probabilities and `q` the drafter's. Under the sample rule both
`p` and `q` are *warped* the same way before they are compared:

    z' = z / T                      temperature T > 0
    z' = mask_top_k(z')             keep tokens with z' >= k-th largest z' (k = 0: off)
    z' = mask_top_p(z')             keep the smallest highest-probability set
                                    whose probability is >= top_p (top token always kept,
                                    and every token tied with the last kept one)
    p  = softmax(z')                masked tokens (z' = -inf) get probability exactly 0

Under greedy decoding `p = softmax(z)` (no warping) is only reported, and the
token is `argmax z` (first maximum on ties).

Under every rule the repetition controls (app/engine/core/repetition.py, §4.5) process
`z` for its row's context before any of this, on both sides: `TokenSampler.process`
for the target's rows, `TokenSampler.draw` for a drafter's.

Everything here is pure and vectorised over any leading dimensions; logits of
any floating dtype are computed in float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from app.engine.core import rowwise
from app.engine.core.repetition import process_rows
from app.engine.settings import RepetitionSettings, SamplingSettings

MASS_SCALE = 2**23  # top-p masses are split at multiples of 1 / MASS_SCALE (see _mask_top_p)


def warp_probs(logits: Tensor, sampling: SamplingSettings) -> Tensor:
    """Temperature, then top-k, then top-p, then softmax: (..., V) -> (..., V) float32."""
    z = logits.float() / sampling.temperature  # (..., V)
    z = _mask_top_k(z, sampling.top_k)
    z = _mask_top_p(z, sampling.top_p)
    return torch.softmax(z, dim=-1)


def greedy_probs(logits: Tensor) -> Tensor:
    """What `p` means under greedy decoding: softmax of the raw logits, float32."""
    return torch.softmax(logits.float(), dim=-1)


def _mask_top_k(z: Tensor, k: int) -> Tensor:
    """Set to -inf every logit below the k-th largest (ties with it are kept)."""
    if k <= 0 or k >= z.shape[-1]:
        return z
    kth = rowwise.topk(z, k)[0][..., -1:]  # (..., 1)
    return z.masked_fill(z < kth, float("-inf"))


def _mask_top_p(z: Tensor, top_p: float) -> Tensor:
    """Keep the smallest set of most probable tokens whose probability reaches top_p.

    Sorted descending, token j is kept iff the mass strictly before it,
    M_j = sum_{i<j} p_(i), is < top_p; so the top token is always kept and the
    set stops at the first token that brings the cumulative mass to >= top_p.
    Tokens tied with the last kept one are kept too, so the set does not depend
    on how the sort orders ties (as top-k keeps ties with its k-th value).

    M_j is summed in float32 (no float64 on the device) without a float32
    cumsum's rounding: each p = hi + lo with hi = p truncated to a multiple of
    2^-23, whose partial sums H_j (<= 2) float32 holds exactly, and lo < 2^-23,
    whose partial sums L_j are small, so their rounding is of order 2^-47 per
    token. top_p = t_hi + t_lo is split the same way on the host, and
    M_j < top_p is tested as (H_j - t_hi) < (t_lo - L_j), whose left side is exact.
    """
    if top_p >= 1.0:
        return z
    probs = torch.softmax(z, dim=-1)  # (..., V) float32
    sorted_probs = torch.sort(probs, dim=-1, descending=True).values  # (..., V)
    hi = torch.floor(sorted_probs * MASS_SCALE) / MASS_SCALE  # (..., V) exact
    lo = sorted_probs - hi  # (..., V) exact, in [0, 2^-23)
    t_hi = math.floor(top_p * MASS_SCALE) / MASS_SCALE  # exact in float64 and float32
    t_lo = top_p - t_hi  # in [0, 2^-23)
    keep_sorted = (_mass_before(hi) - t_hi) < (t_lo - _mass_before(lo))  # (..., V) M_j < top_p
    n_kept = keep_sorted.sum(dim=-1, keepdim=True).clamp(min=1)  # (..., 1)
    last_kept = sorted_probs.gather(-1, n_kept - 1)  # (..., 1) the smallest kept probability
    return z.masked_fill(probs < last_kept, float("-inf"))


def _mass_before(sorted_values: Tensor) -> Tensor:
    """Exclusive prefix sums over the last dimension: (..., V) -> (..., V), 0 first."""
    return F.pad(sorted_values.cumsum(dim=-1)[..., :-1], (1, 0))


class TokenSampler:
    """How one side (target or drafter) turns logits into `p` or `q` and picks a token.

    `settings=None` means greedy: `probs` is the plain softmax and `pick` the
    argmax (first maximum on ties). Otherwise `probs` is `warp_probs` and
    `pick` draws with `torch.multinomial` from `generator` (which must live on
    the same device as the probabilities). Drafters and the decoder share one
    settings value so `q` is warped exactly like `p`.

    `repetition` and `context` (the committed ids, (N,) long) add the repetition
    controls of one pass: `process` applies them to the target's rows and `draw`
    to a drafter's, each row for its own context, so `q` is processed like `p`.
    """

    def __init__(self, settings: SamplingSettings | None, generator: torch.Generator,
                 repetition: RepetitionSettings | None = None, context: Tensor | None = None) -> None:
        self.settings = settings
        self.generator = generator
        self.repetition = repetition or RepetitionSettings()
        self.context = torch.empty(0, dtype=torch.long) if context is None else context
        if self.repetition.active:  # copied to the device now, before any forward of the pass is queued
            self.context = self.context.to(generator.device)

    @property
    def is_greedy(self) -> bool:
        return self.settings is None

    def probs(self, logits: Tensor) -> Tensor:
        """(..., V) logits -> (..., V) float32 probabilities."""
        if self.settings is None:
            return greedy_probs(logits)
        return warp_probs(logits, self.settings)

    def pick(self, probs: Tensor) -> Tensor:
        """(..., V) probabilities -> (...) long token ids."""
        if self.settings is None:
            return rowwise.argmax(probs)
        flat = probs.reshape(-1, probs.shape[-1])  # (N, V)
        ids = torch.multinomial(flat, 1, generator=self.generator)  # (N, 1)
        return ids.reshape(probs.shape[:-1])

    def process(self, logits: Tensor, continuations: Sequence[Tensor]) -> Tensor:
        """(R, V) logits, row r continuing the context with `continuations[r]` -> the rows the rules read.

        The repetition controls for each row's context; the same tensor when they are off.
        """
        if self.repetition.active:
            self.context = self.context.to(logits.device)  # there already unless the logits live elsewhere
        return process_rows(logits, self.context, continuations, self.repetition)

    def draw(self, logits: Tensor, drafted: Sequence[Tensor] = ()) -> tuple[Tensor, Tensor]:
        """A drafter's tokens (...) and q (..., V) from its logits: one row (V,), or consecutive rows (R, V).

        Row r continues the context with `drafted` (the drafts before the first row, token tensors) and the
        tokens drawn for rows 0 .. r-1, so with the repetition controls on, the rows are processed and
        drawn in turn, each exactly like the target's row at that position.
        """
        if not self.repetition.active:
            q = self.probs(logits)  # (..., V)
            return self.pick(q), q
        before = [t.reshape(-1) for t in drafted]
        tokens, rows = [], []
        for row in logits.reshape(-1, logits.shape[-1]):  # (V,) each
            continuation = torch.cat(before) if before else torch.empty(0, dtype=torch.long)
            q = self.probs(self.process(row[None], [continuation])[0])  # (V,)
            token = self.pick(q)  # ()
            before.append(token.reshape(1))
            tokens.append(token)
            rows.append(q)
        return torch.stack(tokens).reshape(logits.shape[:-1]), torch.stack(rows).reshape(logits.shape)
