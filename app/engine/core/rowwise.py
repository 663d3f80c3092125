"""Argmax and top-k along the vocabulary, fast on a CPU for long rows.

Notation: x (..., V) holds rows of V values; blocks are BLOCK consecutive values of a row.

On one CPU thread torch's `argmax` and `topk` along the last dimension cost 2-4 ns per value, a softmax
0.7 and `amax` 0.1: over a 32k-152k vocabulary, and over the K + 1 rows of a verification, that is a
millisecond or more per pass. So long rows on a CPU are searched by blocks: the block maxima (`amax`) say
which block holds the row's first maximum, and the k blocks with the largest maxima hold the row's k largest
values (a block outside them has its maximum, hence every value, below k values inside them). Only those
blocks are then searched value by value. The results equal torch's: argmax is the first maximum, top-k values
come largest first (their ids may differ from torch's only among equal values, whose order torch leaves open).

Short rows, and every other device (where the native kernels are fast and each extra launch costs), take
torch's own ops.
"""

from __future__ import annotations

import torch
from torch import Tensor

BLOCK = 64  # values per block
MIN_VALUES = 30000  # R * V at and above which blocks beat the native ops on a CPU thread (measured)


def _by_blocks(x: Tensor, k: int) -> bool:
    return x.device.type == "cpu" and x.numel() >= MIN_VALUES and x.shape[-1] // BLOCK >= max(16, k)


def argmax(x: Tensor) -> Tensor:
    """x (..., V) -> (...) long: the index of each row's first maximum, as `x.argmax(dim=-1)`."""
    if not _by_blocks(x, 1):
        return x.argmax(dim=-1)
    rows = x.reshape(-1, x.shape[-1])  # (R, V)
    body, tail = _blocks(rows)  # (R, C, BLOCK), (R, V - C * BLOCK)
    block_max = body.amax(dim=-1)  # (R, C)
    best = block_max.argmax(dim=-1)  # (R,) first block holding the maximum
    within = body[torch.arange(rows.shape[0]), best].argmax(dim=-1)  # (R,) first maximum inside it
    found = best * BLOCK + within
    if tail.shape[-1]:  # a value of the tail wins only when strictly larger: the body comes first
        tail_max, tail_at = tail.max(dim=-1)
        larger = tail_max > block_max.gather(1, best[:, None])[:, 0]
        found = torch.where(larger, tail_at + body.shape[1] * BLOCK, found)
    return found.reshape(x.shape[:-1])


def topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """x (..., V) -> the k largest values of each row, largest first, and their ids: (..., k) each."""
    k = min(k, x.shape[-1])
    if not _by_blocks(x, k):
        values, ids = x.topk(k, dim=-1)
        return values, ids
    rows = x.reshape(-1, x.shape[-1])  # (R, V)
    n_rows = rows.shape[0]
    body, tail = _blocks(rows)
    chosen = body.amax(dim=-1).topk(k, dim=-1).indices  # (R, k) the blocks with the k largest maxima
    candidates = body.gather(1, chosen[:, :, None].expand(n_rows, k, BLOCK)).reshape(n_rows, k * BLOCK)
    candidate_ids = (chosen[:, :, None] * BLOCK + torch.arange(BLOCK)).reshape(n_rows, k * BLOCK)
    if tail.shape[-1]:
        tail_ids = torch.arange(body.shape[1] * BLOCK, rows.shape[1]).expand(n_rows, -1)
        candidates = torch.cat([candidates, tail], dim=1)
        candidate_ids = torch.cat([candidate_ids, tail_ids], dim=1)
    values, at = candidates.topk(k, dim=-1)  # (R, k)
    ids = candidate_ids.gather(1, at)
    shape = (*x.shape[:-1], k)
    return values.reshape(shape), ids.reshape(shape)


def _blocks(rows: Tensor) -> tuple[Tensor, Tensor]:
    """(R, V) -> its whole blocks (R, C, BLOCK) and the values after them (R, V - C * BLOCK), both views."""
    whole = rows.shape[1] // BLOCK
    return rows[:, : whole * BLOCK].reshape(rows.shape[0], whole, BLOCK), rows[:, whole * BLOCK:]
