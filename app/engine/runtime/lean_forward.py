"""Chain forwards of Llama-like decoders without the wrappers around their `forward`.

A Hugging Face causal LM's `forward` wraps its decoder layers in per-call work: argument decorators, output
capture, output dataclasses. On a CPU that costs a fixed 0.3-0.5 ms a call, a quarter of a 1-layer draft
model's step and several percent of a 16-layer target's (BENCHMARKS.md, "Lean forwards").

`lean_forward(model)` returns a forward that calls the model's own modules in the order its `forward` does,
embeddings, causal mask (transformers' own `create_causal_mask`, skipped for one row, where it is None),
rotary table, decoder layers, final norm, LM head, with the arguments that forward passes them: the
arithmetic is the same, and so are the logits, the hidden states and the cache it writes, bit for bit
(tests/engine/test_lean_forward.py, per model type). It is offered only where that holds by construction:
transformers' own Llama, Qwen2 and Qwen3 classes, with SDPA attention, full attention in every layer (a
sliding window needs another mask), no logit scaling, and no device map; every other model keeps its
`forward`, and so do tree forwards (their masks are built by the caller).

Notation: T tokens fed after the cache, hidden size H, vocabulary V.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Any

import torch
from torch import nn
from transformers.masking_utils import create_causal_mask

LEAN_CLASSES = frozenset({
    "transformers.models.llama.modeling_llama.LlamaForCausalLM",
    "transformers.models.qwen2.modeling_qwen2.Qwen2ForCausalLM",
    "transformers.models.qwen3.modeling_qwen3.Qwen3ForCausalLM",
})
BODY_PARTS = ("embed_tokens", "rotary_emb", "layers", "norm")


@dataclass(frozen=True)
class LeanForward:
    """The decoder stack (`model.model`) and the LM head of one model."""

    body: Any  # the model's decoder stack: embed_tokens, rotary_emb, layers, norm (nn.Module attributes)
    head: nn.Module
    depth: int  # config.num_hidden_layers: forward runs at most this many of the layers it holds

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache, keep: int = 0,
                 hidden: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """tokens and positions (1, T) long on the model's device; writes `cache`. Logits (1, T or keep, V), and
        with `hidden` the hidden states as the forward's `output_hidden_states` gives them: the embeddings, each
        layer's output, the last one after the final norm; each (1, T, H)."""
        embeds = self.body.embed_tokens(tokens)  # (1, T, H)
        mask = None if tokens.shape[1] == 1 else create_causal_mask(
            config=self.body.config, inputs_embeds=embeds, attention_mask=None, cache=cache, position_ids=positions)
        rope = self.body.rotary_emb(embeds, positions)
        states = [embeds]
        for layer in islice(self.body.layers, self.depth):  # the list in place now: a layer-skip subset too
            states.append(layer(states[-1], attention_mask=mask, position_embeddings=rope, position_ids=positions,
                                cache=cache, use_cache=True))
        last = self.body.norm(states[-1])  # (1, T, H)
        logits = self.head(last[:, -keep:] if keep else last)
        if not hidden:
            return logits, ()
        states[-1] = last
        return logits, tuple(states)


def lean_forward(model) -> LeanForward | None:
    """The lean forward of `model`, or None where its `forward` must run (see the module docstring)."""
    kind = type(model)
    if f"{kind.__module__}.{kind.__qualname__}" not in LEAN_CLASSES or hasattr(model, "hf_device_map"):
        return None
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return None
    if any(layer_type != "full_attention" for layer_type in getattr(config, "layer_types", None) or ()):
        return None
    if getattr(config, "logit_scale", None) or getattr(config, "final_logit_softcapping", None):
        return None
    if getattr(config, "tie_last_hidden_states", None) is False:  # its last hidden state is taken before the norm
        return None
    body, head = getattr(model, "model", None), model.get_output_embeddings()
    if body is None or head is None or not all(hasattr(body, part) for part in BODY_PARTS):
        return None
    return LeanForward(body, head, int(config.num_hidden_layers))
