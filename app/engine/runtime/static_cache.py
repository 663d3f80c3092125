"""A static KV cache whose rollback is a write position (docs/ALGORITHMS.md §2).

Transformers' `StaticCache` holds each layer's keys and values in buffers of a fixed capacity, written at the
layer's write position (hf_compat.py). Here that position is set by the owner (`CachedModel`) before every forward:
rolling back after rejected drafts is setting it lower, and the rejected entries are overwritten by the next
pass. Attention then runs over the whole capacity, so the owner passes a 4D mask that shows each row the
slots it may see: the cached sequence up to its own position (a chain), or the sequence and its tree
ancestors (a token tree, §9). Slots past the write position are never visible.

The capacity is a power of two (at least MIN_CAPACITY); a sequence that outgrows it moves to the next one, its
entries copied, so that a short generation does not attend over the model's whole context. A compiled model's
cache starts instead at its context (`compiled_capacity`, at most COMPILED_CAPACITY slots): the capacity is a
dimension of every compiled shape, and a cache that grew during a generation would compile its forwards again
at each new capacity, where one fixed capacity lets the load compile them all beforehand.
"""

from __future__ import annotations

from typing import cast

import torch
from transformers import StaticCache, StaticLayer

from app.engine.core.transfer import to_device
from app.engine.hf_compat import allocate_like, attention_implementation, set_write_position, static_hooks_problem

MIN_CAPACITY = 64
# The most slots a compiled model's cache starts with: the contexts of small models, a few thousand tokens of
# large ones (longer sequences grow it, and compile their forwards again there).
COMPILED_CAPACITY = 2048
MASKED_ATTENTION = (None, "eager", "sdpa")  # implementations that take a custom 4D mask


def static_problem(model) -> str | None:
    """Why `model` cannot run on this static cache, or None when it can."""
    implementation = attention_implementation(model)
    if implementation not in MASKED_ATTENTION:
        return (f"the static cache needs custom attention masks, which this model's {implementation} attention "
                "does not take (load it with sdpa or eager attention)")
    problem = static_hooks_problem(model.config)
    if problem is not None:
        return problem
    layers = StaticCache(config=model.config, max_cache_len=1).layers
    if not layers or any(type(layer) is not StaticLayer for layer in layers):
        return ("the static cache rolls back by its write position, which needs full-attention layers, and this "
                "model has sliding-window or recurrent ones")
    return None


def compiled_capacity(model) -> int:
    """The capacity a compiled model's cache starts at: its context, as a power of two, COMPILED_CAPACITY at most."""
    config = model.config
    context = next((value for value in (getattr(config, name, None) for name in
                                        ("max_position_embeddings", "n_positions", "max_sequence_length"))
                    if isinstance(value, int) and value > 0), COMPILED_CAPACITY)
    return max(MIN_CAPACITY, 1 << (min(context, COMPILED_CAPACITY) - 1).bit_length())


class StaticKV:
    """A growing `StaticCache`: `reserve` a capacity, `seek` the write position, build the masks."""

    def __init__(self, model, least: int = MIN_CAPACITY) -> None:
        self.config = model.config
        self.device = next(model.parameters()).device
        self.dtype = model.dtype
        self.least = least  # the first capacity reserved
        self.capacity = 0
        self.cache = StaticCache(config=self.config, max_cache_len=MIN_CAPACITY)  # layers allocate on first use
        self.slots = torch.arange(0, device=self.device)

    def reserve(self, needed: int, kept: int) -> None:
        """Make room for `needed` slots, keeping the first `kept` entries."""
        if needed <= self.capacity:
            return
        capacity = max(self.least, 1 << (needed - 1).bit_length())
        grown = StaticCache(config=self.config, max_cache_len=capacity)
        with torch.inference_mode():
            if self.capacity:
                for old, new in zip(self.all_layers(), _static_layers(grown), strict=True):
                    if old.is_initialized:
                        assert old.keys is not None and old.values is not None, "allocated when initialised"
                        allocate_like(new, old.keys[..., :0, :], old.values[..., :0, :])  # same shapes
                        assert new.keys is not None and new.values is not None, "allocated when initialised"
                        new.keys[..., :kept, :] = old.keys[..., :kept, :]
                        new.values[..., :kept, :] = old.values[..., :kept, :]
            self.slots = torch.arange(capacity, device=self.device)
        self.cache, self.capacity = grown, capacity

    def seek(self, position: int) -> None:
        """The next forward writes its rows from slot `position` on."""
        with torch.inference_mode():
            for layer in self.all_layers():
                set_write_position(layer, position)

    @property
    def allocated(self) -> bool:
        """Some layer holds its buffers: a forward has run on this cache (the first allocates them)."""
        return any(layer.is_initialized for layer in self.all_layers())

    def all_layers(self) -> list[StaticLayer]:
        return _static_layers(self.cache)

    def layers(self) -> list[StaticLayer]:
        """The layers that hold entries (a layer subset leaves the others unallocated)."""
        return [layer for layer in self.all_layers() if layer.is_initialized]

    def chain_mask(self, positions: torch.Tensor) -> torch.Tensor:
        """(1, 1, T, capacity) additive mask: the row at position p sees slots 0 .. p (a chain's slot is its
        position). `positions` (T,) on the device."""
        return self._additive(self.slots[None, :] <= positions[:, None])

    def tree_mask(self, visible: torch.Tensor) -> torch.Tensor:
        """(1, 1, T, capacity) additive mask from `visible` (T, S) over the first S slots, the rest hidden."""
        rows, seen = visible.shape
        padded = torch.zeros(rows, self.capacity, dtype=torch.bool)
        padded[:, :seen] = visible
        return self._additive(to_device(padded, self.device))

    def _additive(self, visible: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(visible.shape, dtype=self.dtype, device=self.device)
        return mask.masked_fill_(~visible, torch.finfo(self.dtype).min)[None, None]


def _static_layers(cache: StaticCache) -> list[StaticLayer]:
    """The cache's layers: plain static layers, as `static_problem` made sure."""
    return cast(list[StaticLayer], cache.layers)
