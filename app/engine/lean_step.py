"""One-token forwards of Llama-like decoders without the wrappers around their `forward`.

A Hugging Face causal LM's `forward` wraps its decoder layers in per-call work a one-token step on the dynamic
cache does not need: argument decorators, output capture, the causal mask (None for one query row with no
padding), output dataclasses and the logits slice. On a CPU that costs a fixed 0.3-0.5 ms a call, a quarter of
a 1-layer draft model's step and several percent of a 16-layer target's (BENCHMARKS.md, "One-token steps").

`lean_step(model)` returns a step that calls the model's own modules in the order its `forward` does,
embeddings, rotary table, decoder layers, final norm, LM head, with the arguments that forward passes them: the
arithmetic is the same, and so are the logits, bit for bit, and the cache it writes
(tests/engine/test_lean_step.py, per model type). It is offered only where that holds by construction:
transformers' own Llama, Qwen2 and Qwen3 classes, with SDPA attention, full attention in every layer (a
sliding window would need a mask), no logit scaling, and no device map; every other model keeps its `forward`.

Notation: one token at position `t`, hidden size H, vocabulary V.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

import torch
from torch import nn

LEAN_CLASSES = frozenset({
    "transformers.models.llama.modeling_llama.LlamaForCausalLM",
    "transformers.models.qwen2.modeling_qwen2.Qwen2ForCausalLM",
    "transformers.models.qwen3.modeling_qwen3.Qwen3ForCausalLM",
})
BODY_PARTS = ("embed_tokens", "rotary_emb", "layers", "norm")


@dataclass(frozen=True)
class LeanStep:
    """The decoder stack (`model.model`) and the LM head of one model."""

    body: nn.Module
    head: nn.Module
    depth: int  # config.num_hidden_layers: forward runs at most this many of the layers it holds

    def __call__(self, token: torch.Tensor, position: torch.Tensor, cache) -> torch.Tensor:
        """token (1, 1) and position (1, 1) long on the model's device; writes `cache`; logits (1, 1, V)."""
        hidden = self.body.embed_tokens(token)  # (1, 1, H)
        rope = self.body.rotary_emb(hidden, position_ids=position)
        for layer in islice(self.body.layers, self.depth):  # the list in place now: a layer-skip subset too
            hidden = layer(hidden, attention_mask=None, position_embeddings=rope, position_ids=position, cache=cache,
                           use_cache=True)
        return self.head(self.body.norm(hidden))


def lean_step(model) -> LeanStep | None:
    """The lean one-token step of `model`, or None where its `forward` must run (see the module docstring)."""
    kind = type(model)
    if f"{kind.__module__}.{kind.__qualname__}" not in LEAN_CLASSES or hasattr(model, "hf_device_map"):
        return None
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return None
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return None
    if getattr(config, "logit_scale", None) or getattr(config, "final_logit_softcapping", None):
        return None
    body, head = getattr(model, "model", None), model.get_output_embeddings()
    if body is None or head is None or not all(hasattr(body, part) for part in BODY_PARTS):
        return None
    return LeanStep(body, head, int(config.num_hidden_layers))
