"""Turning logits into the distributions tokens are drawn from.

Notation (docs/ALGORITHMS.md §1, warping §4.1): `z` are logits over a vocabulary of size `V`, `p`
the target's probabilities and `q` the drafter's. Under the sample rule both
`p` and `q` are *warped* the same way before they are compared:

    z' = z / T                      temperature T > 0
    z' = mask_top_k(z')             keep tokens with z' >= k-th largest z' (k = 0: off)
    z' = mask_top_p(z')             keep the smallest highest-probability set
                                    whose probability is >= top_p (top token always kept)
    p  = softmax(z')                masked tokens (z' = -inf) get probability exactly 0

Under greedy decoding `p = softmax(z)` (no warping) is only reported, and the
token is `argmax z` (first maximum on ties).

Everything here is pure and vectorised over any leading dimensions; logits of
any floating dtype are computed in float32.
"""

from __future__ import annotations

import torch
from torch import Tensor

from app.engine.settings import SamplingSettings


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
    kth = torch.topk(z, k, dim=-1).values[..., -1:]  # (..., 1)
    return z.masked_fill(z < kth, float("-inf"))


def _mask_top_p(z: Tensor, top_p: float) -> Tensor:
    """Keep the smallest set of most probable tokens whose probability reaches top_p.

    Sorted descending, token j is kept iff the mass strictly before it is
    < top_p; so the top token is always kept and the set stops at the first
    token that brings the cumulative mass to >= top_p.
    """
    if top_p >= 1.0:
        return z
    probs = torch.softmax(z, dim=-1)  # (..., V)
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)  # (..., V)
    mass_before = torch.cumsum(sorted_probs.double(), dim=-1) - sorted_probs.double()  # (..., V)
    keep_sorted = mass_before < top_p  # (..., V)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # (..., V)
    return z.masked_fill(~keep, float("-inf"))


class TokenSampler:
    """How one side (target or drafter) turns logits into `p` or `q` and picks a token.

    `settings=None` means greedy: `probs` is the plain softmax and `pick` the
    argmax (first maximum on ties). Otherwise `probs` is `warp_probs` and
    `pick` draws with `torch.multinomial` from `generator` (which must live on
    the same device as the probabilities). Drafters and the decoder share one
    settings value so `q` is warped exactly like `p`.
    """

    def __init__(self, settings: SamplingSettings | None, generator: torch.Generator) -> None:
        self.settings = settings
        self.generator = generator

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
            return probs.argmax(dim=-1)
        flat = probs.reshape(-1, probs.shape[-1])  # (N, V)
        ids = torch.multinomial(flat, 1, generator=self.generator)  # (N, 1)
        return ids.reshape(probs.shape[:-1])
