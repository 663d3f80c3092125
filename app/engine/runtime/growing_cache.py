"""A dynamic KV cache whose appends copy the new rows only.

transformers' `DynamicLayer` appends a forward's keys and values by concatenation, which copies the whole
cache in every layer at every forward, a cost that grows with the context: on a CPU the demo target's
one-token step with 1,000 tokens cached is 23 % faster without it (BENCHMARKS.md, "Growing cache").
`GrowingLayer` keeps the same tensors as views of buffers whose capacity doubles when they fill, writes
each forward's rows into place, and crops by taking a shorter view (what `DynamicLayer.crop` already
does), so a rollback copies nothing either.

The attention reads the same numbers in the same order, so the logits and the cache equal those of
`DynamicLayer` bit for bit (tests/engine/test_growing_cache.py). Whoever replaces `keys` and `values` with
other tensors (a beam reorder, say) is honoured: the next append copies them into fresh buffers.

Notation: keys and values are (B, heads, L, d), L tokens cached; a forward appends T.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

MIN_CAPACITY = 64  # tokens a layer's first buffer holds


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are the first L entries of buffers of capacity C >= L."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.key_buffer: torch.Tensor | None = None  # (B, heads, C, d)
        self.value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args,
               **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        """Append key and value states (B, heads, T, d); the keys and values of all L + T tokens."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        old = self.get_seq_length()
        new = old + key_states.shape[-2]
        if not self._holds_views() or new > self.capacity:
            self._grow(key_states, value_states, old, new)
        assert self.key_buffer is not None and self.value_buffer is not None
        self.key_buffer[..., old:new, :].copy_(key_states)
        self.value_buffer[..., old:new, :].copy_(value_states)
        self.keys = self.key_buffer[..., :new, :]
        self.values = self.value_buffer[..., :new, :]
        return self.keys, self.values

    @property
    def capacity(self) -> int:
        return 0 if self.key_buffer is None else self.key_buffer.shape[-2]

    def _holds_views(self) -> bool:
        """The keys and values are still views of the start of the buffers (a crop keeps them so)."""
        keys, buffer = self.keys, self.key_buffer
        return buffer is not None and self.value_buffer is not None and keys is not None and \
            keys.data_ptr() == buffer.data_ptr() and keys.stride() == buffer.stride() and \
            self.values is not None and self.values.data_ptr() == self.value_buffer.data_ptr()

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, old: int, new: int) -> None:
        """New buffers of capacity max(MIN_CAPACITY, 2 (L + T)) holding the L cached tokens."""
        capacity = max(MIN_CAPACITY, 2 * new)
        self.key_buffer = _buffer(key_states, self.keys, old, capacity)
        self.value_buffer = _buffer(value_states, self.values, old, capacity)


def _buffer(states: torch.Tensor, cached: torch.Tensor | None, length: int, capacity: int) -> torch.Tensor:
    buffer = states.new_empty((*states.shape[:-2], capacity, states.shape[-1]))  # (B, heads, C, d)
    if length:
        assert cached is not None
        buffer[..., :length, :].copy_(cached)
    return buffer


def growing_cache() -> DynamicCache:
    """A `DynamicCache` whose layers, created as the model first writes them, are `GrowingLayer`s."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache
