"""The lean forward: the same logits, hidden states and cache as the model's own forward, bit for bit, where it
is offered; the forward everywhere else."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    DynamicCache,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    Qwen3Config,
)

from app.engine.runtime.cached_model import CachedModel, only_layers
from app.engine.runtime.lean_forward import lean_forward

CONFIGS = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config, "mistral": MistralConfig}


def tiny(arch: str, attention: str = "sdpa", **overrides):
    torch.manual_seed(0)
    config = CONFIGS[arch](vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                           head_dim=8, **overrides)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attention).eval()


def tokens(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 97, (1, n), generator=torch.Generator().manual_seed(seed))


def both(model, lean, ours: DynamicCache, theirs: DynamicCache, fed: torch.Tensor, keep: int = 0):
    """The lean forward and the model's forward of `fed` (1, T) after the caches: logits and hidden states."""
    start = ours.get_seq_length()
    positions = torch.arange(start, start + fed.shape[1])[None]
    with torch.inference_mode():
        mine = lean(fed, positions, ours, keep, hidden=True)
        out = model(input_ids=fed, position_ids=positions, cache=theirs, use_cache=True, output_hidden_states=True,
                    logits_to_keep=keep)
    return mine, (out.logits, out.hidden_states)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_the_lean_forward_equals_the_forward_and_writes_the_same_cache(arch):
    """A prompt (logits of its last row only), one-token steps, a block of rows, a rollback, more steps."""
    model = tiny(arch)
    lean = lean_forward(model)
    assert lean is not None
    ours, theirs = DynamicCache(), DynamicCache()
    feeds = [(tokens(9, 1), 1), (tokens(1, 2), 0), (tokens(1, 3), 0), (tokens(5, 4), 0), (None, 0), (tokens(1, 5), 0)]
    for fed, keep in feeds:
        if fed is None:  # a rollback of three rejected rows
            ours.crop(-3)
            theirs.crop(-3)
            continue
        (logits, states), (reference, reference_states) = both(model, lean, ours, theirs, fed, keep)
        assert torch.equal(logits, reference)
        assert len(states) == len(reference_states) == 4
        assert all(torch.equal(a, b) for a, b in zip(states, reference_states, strict=True))
    for mine, reference in zip(ours.layers, theirs.layers, strict=True):
        assert torch.equal(mine.keys, reference.keys) and torch.equal(mine.values, reference.values)


def test_a_layer_subset_and_capture_hooks_keep_the_lean_forward_exact():
    """Layer skip swaps the layer list in; a forward that asked for hidden states left hooks on every layer."""
    model = tiny("llama")
    with torch.inference_mode():
        model(input_ids=torch.tensor([[1, 2]]), output_hidden_states=True)  # installs the capture hooks
    lean, ours, theirs = lean_forward(model), DynamicCache(), DynamicCache()
    subset = torch.nn.ModuleList([model.model.layers[0], model.model.layers[2]])
    with only_layers(model, subset):  # each layer writes its own entries in the cache
        for fed in (tokens(4, 6), tokens(1, 7), tokens(3, 8)):
            (logits, states), (reference, reference_states) = both(model, lean, ours, theirs, fed)
            assert torch.equal(logits, reference) and len(states) == len(reference_states) == 3
            assert all(torch.equal(a, b) for a, b in zip(states, reference_states, strict=True))


@pytest.mark.parametrize("model", [
    pytest.param(lambda: tiny("mistral"), id="another class"),
    pytest.param(lambda: tiny("llama", attention="eager"), id="eager attention"),
    pytest.param(lambda: tiny("qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=1),
                 id="a sliding window"),
])
def test_other_models_keep_their_forward(model):
    assert lean_forward(model()) is None


def test_the_cached_model_runs_chains_lean_and_matches_a_recompute():
    model = tiny("qwen3")
    cached = CachedModel(model)
    calls = []
    lean = cached._lean  # noqa: SLF001 - counting its calls
    cached._lean = lambda *args: calls.append(args[0].shape[1]) or lean(*args)  # noqa: SLF001
    ids = tokens(14, 9)[0]
    cached.advance_to(ids[:8], last=1)
    stepped = [cached.advance_to(ids[: n + 1])[-1] for n in range(8, 11)]
    block = cached.advance_to(ids)  # the last three rows at once
    with torch.inference_mode():
        recomputed = model(input_ids=ids[None]).logits[0, 8:14]
    assert calls == [8, 1, 1, 1, 3]
    torch.testing.assert_close(torch.cat([torch.stack(stepped), block]), recomputed, rtol=1e-5, atol=1e-5)


def test_execution_can_switch_the_lean_forward_off_with_the_same_logits():
    from app.engine.runtime.execution import Execution

    model = tiny("llama")
    lean, plain = CachedModel(model), CachedModel(model, execution=Execution(lean=False))
    assert lean._lean is not None and plain._lean is None  # noqa: SLF001
    ids = tokens(10, 11)[0]
    for cached in (lean, plain):
        cached.advance_to(ids[:6], last=1)
    for n in range(6, 10):
        assert torch.equal(lean.advance_to(ids[: n + 1]), plain.advance_to(ids[: n + 1]))
