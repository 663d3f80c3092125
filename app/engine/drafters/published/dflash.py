"""Published DFlash block drafters (z-lab/dflash, `DFlashDraftModel`, dflash/model.py).

Notation as in heads/dflash.py (x_0 .. x_{N-1} committed, the anchor x_{N-1} not yet seen by the target, h^l_i the
target's HF `hidden_states[l]` at i, bs the checkpoint's `block_size`, m its `dflash_config.mask_token_id`). The
checkpoint is a Qwen3-shaped stack of n layers with no embeddings or head of its own (the target's are used):

    c_i   = hidden_norm(fc [ h^{t_1 + 1}_i ; ... ; h^{t_n' + 1}_i ])   # context, i in [0, N-2]; t = target_layer_ids
    b     = emb([x_{N-1}, m, ..., m])                                 # (bs, H) block rows at N-1 .. N+bs-2
    each layer:  a = input_layernorm(b)
                 Q = q_norm(q_proj a),  K = k_norm(k_proj [c ; a]),  V = v_proj [c ; a]   # per head, then RoPE
                 b = b + o_proj Attn(Q, K, V)                          # not causal: every block row sees all
                 b = b + MLP(post_attention_layernorm(b))
    logits_j = lm_head(norm(b_j)),  j = 1 .. bs-1                      # row j predicts x_{N-1+j}

The taps are `hidden_states[id + 1]` (extract_context_feature's offset; one more than EAGLE-3's speculators ids),
concatenated in the order of `target_layer_ids`; without them, build_target_layer_ids' spread over the target.
The published generator caches the context keys and values (each a function of its own row only) and crops the
block's; this drafter keeps no state and recomputes them each pass, which gives the same rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from app.engine.drafters.base import Draft
from app.engine.drafters.heads.common import HeadConfig, HeadDrafter, TargetParts, TargetShape, as_draft, has_features
from app.engine.drafters.published.checkpoint import PublishedHead, check_loaded, place, read_weights, verifier_notice
from app.engine.drafters.published.formats import DFLASH, CheckpointInfo, dflash_taps
from app.engine.errors import DrafterCheckpointError

if TYPE_CHECKING:
    from app.engine.core.sampling import TokenSampler
    from app.engine.drafters.registry import Models

WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin")


class DFlashAttention(nn.Module):
    """Queries from the block rows, keys and values from [context ; block rows]; names as in the checkpoint."""

    def __init__(self, config) -> None:
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

        super().__init__()
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        bias, hidden = bool(getattr(config, "attention_bias", False)), config.hidden_size
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=bias)
        self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(self, rows: torch.Tensor, context: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """rows (bs, H), context (Tc, H), cos/sin (Tc+bs, d) -> (bs, H)."""
        from transformers.models.qwen3.modeling_qwen3 import rotate_half

        both = torch.cat([context, rows])  # (Tc+bs, H)
        q = self.q_norm(self.q_proj(rows).view(rows.shape[0], self.heads, self.head_dim)).transpose(0, 1)
        k = self.k_norm(self.k_proj(both).view(both.shape[0], self.kv_heads, self.head_dim)).transpose(0, 1)
        v = self.v_proj(both).view(both.shape[0], self.kv_heads, self.head_dim).transpose(0, 1)
        q_cos, q_sin = cos[-rows.shape[0]:], sin[-rows.shape[0]:]
        q, k = q * q_cos + rotate_half(q) * q_sin, k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(group, 0), v.repeat_interleave(group, 0))  # (heads, bs, d), not causal
        return self.o_proj(out.transpose(0, 1).reshape(rows.shape[0], -1))


class DFlashLayer(nn.Module):
    def __init__(self, config) -> None:
        from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm

        super().__init__()
        self.self_attn = DFlashAttention(config)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, rows: torch.Tensor, context: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        rows = rows + self.self_attn(self.input_layernorm(rows), context, cos, sin)
        return rows + self.mlp(self.post_attention_layernorm(rows))


class DFlashDraft(nn.Module):
    """`DFlashDraftModel` without embeddings or head: fc, hidden_norm, layers, norm (the checkpoint's names)."""

    def __init__(self, config, num_taps: int, tap_order: tuple[int, ...], block_size: int, mask_token_id: int) -> None:
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, Qwen3RotaryEmbedding

        super().__init__()
        self.block_size, self.mask_token_id = block_size, mask_token_id
        self.tap_order = tap_order  # the sorted features' indices in target_layer_ids' order
        self.fc = nn.Linear(num_taps * config.hidden_size, config.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.layers = nn.ModuleList(DFlashLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary = Qwen3RotaryEmbedding(config)  # buffers only: not in the checkpoint

    def forward(self, block: torch.Tensor, features: list[torch.Tensor]) -> torch.Tensor:
        """Block embeddings (bs, H) and sorted features [(Tc, H_t)] -> normed block outputs (bs, H)."""
        context = self.hidden_norm(self.fc(torch.cat([features[i] for i in self.tap_order], dim=-1)))  # (Tc, H)
        positions = torch.arange(context.shape[0] + block.shape[0], device=block.device)[None]
        cos, sin = (t[0] for t in self.rotary(block, positions))  # (Tc+bs, d) each
        for layer in self.layers:
            block = layer(block, context, cos, sin)
        return self.norm(block)


class PublishedDFlashDrafter(HeadDrafter):
    """One forward of the block [x_{N-1}, m, ..., m] drafts up to bs-1 tokens; stateless."""

    module: DFlashDraft

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler,
                features: list[torch.Tensor] | None = None) -> Draft | None:
        if not has_features(features):
            return None
        module = self.module
        with torch.inference_mode():
            block_ids = torch.full((module.block_size,), module.mask_token_id, dtype=torch.long)
            block_ids[0] = ids[-1]
            out = module(self.parts.embed(block_ids), features)[1: 1 + k]  # (K', H)
            tokens, q = sampler.draw(self.parts.logits(out))  # (K',), (K', V)
        return as_draft(tokens, q)


def check_target(config: dict, taps: tuple[int, ...], target: TargetShape, source: str) -> None:
    """Refuse, in one line, a checkpoint whose hidden size, vocabulary, mask token or taps do not fit the target."""
    hidden, vocab = int(config.get("hidden_size") or 0), int(config.get("vocab_size") or target.vocab_size)
    mask = (config.get("dflash_config") or {}).get("mask_token_id")
    problem = ""
    if hidden != target.hidden_size:
        problem = f"hidden size {hidden}, the target's {target.hidden_size}"
    elif vocab != target.vocab_size:
        problem = f"vocabulary {vocab}, the target's {target.vocab_size}"
    elif mask is None or not 0 <= int(mask) < target.vocab_size:
        problem = f"mask token id {mask}, not in the target's vocabulary of {target.vocab_size}"
    elif not taps or max(taps) > target.num_layers:
        problem = f"taps hidden_states{list(taps)}, the target has {target.num_layers} layers"
    if problem:
        raise DrafterCheckpointError(f"{source!r} is a DFlash drafter for another target ({problem}); give the "
                                     "DFlash checkpoint trained for the loaded target.")


def load(folder: Path, config: dict, source: str, models: Models) -> PublishedHead:
    """A z-lab DFlash checkpoint, checked against `models.target` and placed on its device."""
    from transformers import Qwen3Config

    target = TargetShape.of(models.target, models.num_layers)
    taps = dflash_taps(config, target.num_layers)
    check_target(config, taps, target, source)
    if "sliding_attention" in (config.get("layer_types") or []):
        raise DrafterCheckpointError(f"{source!r} has sliding-window DFlash layers; this version reads DFlash "
                                     "checkpoints whose layers all attend in full.")
    layer_config = Qwen3Config(**{k: v for k, v in config.items() if k not in ("architectures", "auto_map")})
    ordered = tuple(sorted(set(taps)))
    module = DFlashDraft(layer_config, len(taps), tuple(ordered.index(t) for t in taps), int(config["block_size"]),
                         int(config["dflash_config"]["mask_token_id"]))
    weights = {key: value for key, value in read_weights(folder, WEIGHT_NAMES).items()
               if not key.endswith("rotary_emb.inv_freq")}
    check_loaded(module, {f"rotary.{k}": v for k, v in module.rotary.state_dict().items()} | weights, source, DFLASH)
    place(module, models)
    info = CheckpointInfo(DFLASH, "dflash", source, str(config.get("base_model_name_or_path") or ""),
                          target.vocab_size, taps)
    head_config = HeadConfig("dflash", target, ordered, {}, target_name=info.verifier)
    return PublishedHead("dflash", head_config, module, folder, info, TargetParts.of(models.target),
                         PublishedDFlashDrafter, verifier_notice(info, models.target_name))
