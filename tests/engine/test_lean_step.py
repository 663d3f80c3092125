"""The lean one-token step: the same logits and the same cache as the model's own forward, bit for bit, where it
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

from app.engine.cached_model import CachedModel, only_layers
from app.engine.lean_step import lean_step

CONFIGS = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config, "mistral": MistralConfig}


def tiny(arch: str, attention: str = "sdpa", **overrides):
    torch.manual_seed(0)
    config = CONFIGS[arch](vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                           head_dim=8, **overrides)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attention).eval()


def prefilled(model, prompt: torch.Tensor) -> DynamicCache:
    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=prompt[None], cache=cache, use_cache=True)
    return cache


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_lean_steps_equal_the_forward_and_write_the_same_cache(arch):
    model = tiny(arch)
    step = lean_step(model)
    assert step is not None
    prompt = torch.randint(0, 97, (7,), generator=torch.Generator().manual_seed(1))
    ours, theirs = prefilled(model, prompt), prefilled(model, prompt)
    with torch.inference_mode():
        for t, token in enumerate(torch.randint(0, 97, (6,), generator=torch.Generator().manual_seed(2))):
            position = torch.tensor([[prompt.numel() + t]])
            lean = step(token.view(1, 1), position, ours)  # (1, 1, V)
            full = model(input_ids=token.view(1, 1), position_ids=position, cache=theirs, use_cache=True).logits
            assert torch.equal(lean, full)
    for mine, reference in zip(ours.layers, theirs.layers, strict=True):
        assert torch.equal(mine.keys, reference.keys) and torch.equal(mine.values, reference.values)


def test_a_layer_subset_and_capture_hooks_keep_the_lean_step_exact():
    """Layer skip swaps the layer list in; a forward that asked for hidden states left hooks on every layer."""
    model = tiny("llama")
    with torch.inference_mode():
        model(input_ids=torch.tensor([[1, 2]]), output_hidden_states=True)  # installs the capture hooks
    step, prompt = lean_step(model), torch.tensor([5, 6, 7])
    subset = torch.nn.ModuleList([model.model.layers[0], model.model.layers[2]])
    ours, theirs = prefilled(model, prompt), prefilled(model, prompt)
    position = torch.tensor([[3]])
    with torch.inference_mode(), only_layers(model, subset):  # each layer writes its own entries in the cache
        lean = step(torch.tensor([[9]]), position, ours)
        full = model(input_ids=torch.tensor([[9]]), position_ids=position, cache=theirs, use_cache=True).logits
    assert torch.equal(lean, full)


@pytest.mark.parametrize("model", [
    pytest.param(lambda: tiny("mistral"), id="another class"),
    pytest.param(lambda: tiny("llama", attention="eager"), id="eager attention"),
    pytest.param(lambda: tiny("qwen2", use_sliding_window=True, sliding_window=4, max_window_layers=1),
                 id="a sliding window"),
])
def test_other_models_keep_their_forward(model):
    assert lean_step(model()) is None


def test_the_cached_model_steps_lean_and_reads_the_same_logits():
    """One-token extends go the lean way, longer ones through the forward; the logits equal a full recompute."""
    model = tiny("qwen3")
    cached = CachedModel(model)
    calls = []
    lean = cached._lean  # noqa: SLF001 - counting its calls
    cached._lean = lambda *args: calls.append(1) or lean(*args)  # noqa: SLF001
    ids = torch.randint(0, 97, (12,), generator=torch.Generator().manual_seed(3))
    cached.advance_to(ids[:8], last=1)
    stepped = [cached.advance_to(ids[: n + 1])[-1] for n in range(8, 12)]
    with torch.inference_mode():
        recomputed = model(input_ids=ids[None]).logits[0, 8:12]
    assert len(calls) == 4
    torch.testing.assert_close(torch.stack(stepped), recomputed, rtol=1e-5, atol=1e-5)
