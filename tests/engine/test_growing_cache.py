"""The growing cache: the same logits and cache as transformers' concatenating DynamicLayer, bit for bit, through
appends past its capacity, rollbacks, tree paths and replaced tensors; appends copy only the new rows."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig, Qwen2Config

from app.engine.runtime.cached_model import CachedModel
from app.engine.runtime.execution import Execution
from app.engine.runtime.growing_cache import MIN_CAPACITY, GrowingLayer, growing_cache

CONFIGS = {"llama": LlamaConfig, "qwen2": Qwen2Config}


def tiny(arch: str = "llama", attention: str = "sdpa"):
    torch.manual_seed(0)
    config = CONFIGS[arch](vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, head_dim=8)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attention).eval()


def tokens(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 97, (1, n), generator=torch.Generator().manual_seed(seed))


def forward(model, cache, fed: torch.Tensor) -> torch.Tensor:
    start = cache.get_seq_length()
    with torch.inference_mode():
        return model(input_ids=fed, position_ids=torch.arange(start, start + fed.shape[1])[None], cache=cache,
                     use_cache=True).logits


@pytest.mark.parametrize(("arch", "attention"), [("llama", "sdpa"), ("qwen2", "eager")])
def test_the_growing_cache_equals_the_concatenating_one_through_growth_and_rollbacks(arch, attention):
    """Blocks and single tokens past two capacity doublings, with rollbacks between them."""
    model = tiny(arch, attention)
    ours, theirs = growing_cache(), DynamicCache()
    generator = torch.Generator().manual_seed(3)
    seen_capacities = set()
    for step in range(60):
        if step % 4 == 3:  # reject some rows
            drop = int(torch.randint(1, 4, (), generator=generator))
            ours.crop(-drop)
            theirs.crop(-drop)
            continue
        fed = tokens(int(torch.randint(1, 9, (), generator=generator)), step)
        assert torch.equal(forward(model, ours, fed), forward(model, theirs, fed))
        seen_capacities.add(ours.layers[0].capacity)
    assert all(isinstance(layer, GrowingLayer) for layer in ours.layers)
    assert len(seen_capacities) >= 3 and min(seen_capacities) == MIN_CAPACITY  # it grew, twice at least
    for mine, reference in zip(ours.layers, theirs.layers, strict=True):
        assert torch.equal(mine.keys, reference.keys) and torch.equal(mine.values, reference.values)


def test_an_append_writes_into_the_buffer_in_place():
    """Within the capacity the buffer is not reallocated: the cached entries are not copied again."""
    layer = GrowingLayer()
    keys = torch.randn(1, 2, 5, 4)
    layer.update(keys, keys + 1)
    buffer = layer.key_buffer
    assert buffer is not None and layer.keys.data_ptr() == buffer.data_ptr()
    more = torch.randn(1, 2, 3, 4)
    layer.update(more, more + 1)
    assert layer.key_buffer is buffer and layer.get_seq_length() == 8
    assert torch.equal(layer.keys, torch.cat([keys, more], dim=-2))
    assert torch.equal(layer.values, torch.cat([keys, more], dim=-2) + 1)
    layer.crop(-6)  # a rollback takes a shorter view
    layer.update(more, more)
    assert layer.key_buffer is buffer and torch.equal(layer.keys, torch.cat([keys[..., :2, :], more], dim=-2))


def test_tensors_put_in_place_of_the_views_are_adopted():
    """Whoever replaces the keys and values (a beam reorder) gets them kept, followed by the new rows."""
    layer = GrowingLayer()
    layer.update(torch.randn(2, 1, 4, 3), torch.randn(2, 1, 4, 3))
    layer.batch_select_indices(torch.tensor([1, 0]))  # indexing: tensors of their own, not views
    replaced_keys, replaced_values = layer.keys.clone(), layer.values.clone()
    new = torch.randn(2, 1, 1, 3)
    keys, values = layer.update(new, new)
    assert torch.equal(keys, torch.cat([replaced_keys, new], dim=-2))
    assert torch.equal(values, torch.cat([replaced_values, new], dim=-2))
    assert keys.data_ptr() == layer.key_buffer.data_ptr()


@pytest.mark.parametrize("growing", [True, False])
def test_cached_model_uses_the_growing_cache_unless_asked_not_to(growing):
    model = tiny()
    cached = CachedModel(model, execution=Execution(growing=growing))
    ids = tokens(12, 9)[0]
    cached.advance_to(ids)
    assert all(isinstance(layer, GrowingLayer) == growing for layer in cached.cache.layers)


def test_a_tree_path_kept_in_the_growing_cache_equals_recomputing_it():
    """keep_path moves the accepted rows' entries inside the buffer; the next forward matches a fresh cache."""
    model = tiny()
    cached = CachedModel(model)
    ids = tokens(10, 1)[0]
    cached.advance_to(ids)
    # Tail rows: 0 and 1 hang off the sequence, 2 continues 1, 3 continues 2.
    tail = torch.tensor([5, 6, 7, 8])
    cached.extend_tree(tail, torch.tensor([-1, -1, 1, 2]))
    cached.keep_path([1, 2, 3])
    kept = torch.cat([ids, tail[1:]])
    nxt = torch.tensor([9])
    logits = cached.extend(nxt)
    fresh = CachedModel(model, execution=Execution(growing=False))
    assert torch.allclose(logits, fresh.advance_to(torch.cat([kept, nxt]))[-1:], atol=1e-5)
