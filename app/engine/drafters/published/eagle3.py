"""Published EAGLE-3 drafters: SafeAILab / SpecForge checkpoints and vLLM's speculators format.

Notation as in heads/common.py (x_0 .. x_{N-1} committed, h^l_i the target's HF `hidden_states[l]` at i, H the
drafter's hidden size, H_t the target's, V the target's vocabulary, V_d the draft vocabulary). One decoder layer
(docs/ALGORITHMS.md §8.8; SafeAILab/EAGLE eagle/model/cnets.py, vllm model_executor/models/llama_eagle3.py,
speculators models/eagle3):

    g_i   = fc(norm_fc?[ h^a_i ; h^b_i ; h^c_i ])               # (3 H_t -> H), taps a < b < c
    e_i   = emb(x_{i+1})                                        # the target's table, or the checkpoint's own
    n_i   = [ input_layernorm(e_i) ; hidden_norm(g_i) ]         # (2H): q, k, v read 2H
    r_i   = hidden_norm(g_i) if norm_before_residual else g_i
    o'_i  = r_i + Attn(n)_i                                     # causal over all rows
    o_i   = o'_i + MLP(post_attention_layernorm(o'_i))
    z_i   = lm_head(norm(o_i))                                  # (V_d,) predicts x_{i+2}
    x     = d + d2t[d]                                          # a draft id d as a target id

A drafting step feeds the drafter's own o (pre-norm) as the next row's g, as the reference implementations do;
so the drafter runs in heads/eagle.py's EagleDrafter (cached committed rows, chains and trees) with this module
in place of the playground's own head. The draft distribution is spread over the target's vocabulary with the
unmapped ids at probability 0 (vLLM's `compute_logits`), so the rejection rule stays exact.

Tap layers: a checkpoint without them reads h^2, h^{L//2}, h^{L-3} (the input of those layers; low first).
speculators' `eagle_aux_hidden_state_layer_ids` are the layers whose *input* is taken (vLLM), the same indices;
SpecForge's `eagle_config.eagle_aux_hidden_state_layer_ids` name layer *outputs* (SGLang adds 1), so h^{id+1}.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from app.engine.drafters.heads.common import HeadConfig, TargetParts, TargetShape
from app.engine.drafters.heads.eagle import EagleDrafter, EagleHead
from app.engine.drafters.heads.layers import MLP, KeysValues, RMSNorm
from app.engine.drafters.published.checkpoint import (
    PublishedHead,
    check_loaded,
    place,
    read_weights,
    verifier_notice,
)
from app.engine.drafters.published.formats import CheckpointInfo, declared
from app.engine.errors import DrafterCheckpointError

if TYPE_CHECKING:
    from app.engine.loading.models import LoadedModels

WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin")
UNLIMITED = 1 << 30  # EAGLE-3 attends to every earlier row: a window no sequence reaches
PLAYGROUND_EPS, PLAYGROUND_ROPE_THETA = 1e-6, 10000.0  # of EAGLE-3 layers trained here (heads/layers.py's values)
# speculators flags whose layers this version does not build; a checkpoint that sets one is refused.
UNREAD_FLAGS = ("fc_norm", "norm_output")


@dataclass(frozen=True)
class Eagle3Shape:
    """The drafter's sizes and switches, read from either layout's config.json."""

    hidden_size: int
    target_hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float
    vocab_size: int  # the target vocabulary V it was trained with
    draft_vocab_size: int
    layers: int
    norm_before_residual: bool
    norm_before_fc: bool
    rope: dict  # the Llama config's rope fields (rope_theta, rope_scaling / rope_parameters, positions)


def layer_shape(layer: dict, top: dict, source: str) -> Eagle3Shape:
    """Sizes from a Llama-style `layer` config, with the EAGLE-3 fields of `top` (the same dict for SpecForge)."""
    try:
        hidden, heads = int(layer["hidden_size"]), int(layer["num_attention_heads"])
        vocab = int(layer["vocab_size"])
        shape = Eagle3Shape(
            hidden_size=hidden, target_hidden_size=int(top.get("target_hidden_size") or hidden), heads=heads,
            kv_heads=int(layer.get("num_key_value_heads") or heads),
            head_dim=int(layer.get("head_dim") or hidden // heads), intermediate=int(layer["intermediate_size"]),
            eps=float(layer.get("rms_norm_eps", 1e-6)), vocab_size=vocab,
            draft_vocab_size=int(top.get("draft_vocab_size") or vocab), layers=int(layer.get("num_hidden_layers", 1)),
            norm_before_residual=bool(top.get("norm_before_residual", False)),
            norm_before_fc=bool(top.get("norm_before_fc", False)),
            rope={key: layer[key] for key in ("rope_theta", "rope_scaling", "rope_parameters",
                                              "max_position_embeddings") if layer.get(key) is not None})
    except (KeyError, TypeError, ValueError) as exc:
        raise DrafterCheckpointError(f"the EAGLE-3 config of {source!r} lacks or mangles {exc}; download the "
                                     "checkpoint again.") from exc
    if shape.layers != 1:
        raise DrafterCheckpointError(f"{source!r} is an EAGLE-3 drafter of {shape.layers} decoder layers; this version "
                                     "reads one-layer drafters (the published EAGLE-3 checkpoints): choose one.")
    unread = [flag for flag in UNREAD_FLAGS if top.get(flag)]
    if unread or layer.get("attention_bias") or layer.get("mlp_bias"):
        raise DrafterCheckpointError(f"{source!r} sets {unread or 'attention or MLP biases'}, which this version "
                                     "does not read; choose a checkpoint without them.")
    return shape


def rotary_frequencies(shape: Eagle3Shape) -> tuple[torch.Tensor, float]:
    """(head_dim/2,) RoPE inverse frequencies and the attention scaling of the checkpoint's Llama rope settings
    (llama3, linear, yarn ...), computed as transformers computes them for the published layers."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=shape.hidden_size, num_attention_heads=shape.heads,
                         num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim, **shape.rope)
    rotary = LlamaRotaryEmbedding(config)
    return rotary.inv_freq.float(), float(rotary.attention_scaling)


class Eagle3Attention(nn.Module):
    """Llama attention whose q, k, v read `width` x H inputs (2 in EAGLE-3's layer, 1 in EAGLE-1's); grouped keys
    and values; explicit memory and mask."""

    def __init__(self, shape: Eagle3Shape, width: int = 2) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        self.q_proj = nn.Linear(width * shape.hidden_size, shape.heads * shape.head_dim, bias=False)
        self.k_proj = nn.Linear(width * shape.hidden_size, shape.kv_heads * shape.head_dim, bias=False)
        self.v_proj = nn.Linear(width * shape.hidden_size, shape.kv_heads * shape.head_dim, bias=False)
        self.o_proj = nn.Linear(shape.heads * shape.head_dim, shape.hidden_size, bias=False)
        inv_freq, self.scaling = rotary_frequencies(shape)
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(..., T, heads, d) rotated by `positions` (T,) (half-split layout, as Llama)."""
        angles = positions.to(x.device, torch.float32)[:, None] * self.inv_freq.float()  # (T, d/2)
        angles = torch.cat([angles, angles], dim=-1)  # (T, d)
        cos = (angles.cos() * self.scaling)[:, None, :].to(x.dtype)  # (T, 1, d)
        sin = (angles.sin() * self.scaling)[:, None, :].to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def keys_values(self, normed: torch.Tensor, positions: torch.Tensor) -> KeysValues:
        """Rows (..., T, 2H) at `positions` -> rotated keys and values (..., T, kv_heads, d)."""
        keys = self.k_proj(normed).unflatten(-1, (self.kv_heads, self.head_dim))
        values = self.v_proj(normed).unflatten(-1, (self.kv_heads, self.head_dim))
        return KeysValues(self.rotate(keys, positions), values, positions)

    def forward(self, normed: torch.Tensor, positions: torch.Tensor, memory: KeysValues,
                mask: torch.Tensor) -> torch.Tensor:
        """Rows (..., Tq, 2H) attend to `memory` under mask (Tq, Tk) -> (..., Tq, H)."""
        q = self.rotate(self.q_proj(normed).unflatten(-1, (self.heads, self.head_dim)), positions)
        group = self.heads // self.kv_heads
        k = memory.keys.repeat_interleave(group, dim=-2).transpose(-3, -2)  # (..., heads, Tk, d)
        v = memory.values.repeat_interleave(group, dim=-2).transpose(-3, -2)
        out = F.scaled_dot_product_attention(q.transpose(-3, -2), k, v, attn_mask=mask)  # (..., heads, Tq, d)
        return self.o_proj(out.transpose(-3, -2).flatten(-2))


class Eagle3Layer(nn.Module):
    """The EAGLE-3 decoder layer; rows u = [e ; g] (..., T, 2H). The methods are heads/layers.py Block's, so the
    playground's EAGLE drafter runs it unchanged."""

    def __init__(self, shape: Eagle3Shape) -> None:
        super().__init__()
        self.hidden_size, self.norm_before_residual = shape.hidden_size, shape.norm_before_residual
        self.input_layernorm = RMSNorm(shape.hidden_size, shape.eps)
        self.hidden_norm = RMSNorm(shape.hidden_size, shape.eps)
        self.self_attn = Eagle3Attention(shape)
        self.post_attention_layernorm = RMSNorm(shape.hidden_size, shape.eps)
        self.mlp = MLP(shape.hidden_size, shape.intermediate)  # SwiGLU, with the Llama names

    def attn_norm(self, u: torch.Tensor) -> torch.Tensor:
        """n = [input_layernorm(e) ; hidden_norm(g)] (..., T, 2H)."""
        embedded, hidden = u.split(self.hidden_size, dim=-1)
        return torch.cat([self.input_layernorm(embedded), self.hidden_norm(hidden)], dim=-1)

    def keys_values(self, u: torch.Tensor, positions: torch.Tensor, normed: torch.Tensor | None = None) -> KeysValues:
        return self.self_attn.keys_values(self.attn_norm(u) if normed is None else normed, positions)

    def forward(self, u: torch.Tensor, positions: torch.Tensor, memory: KeysValues, mask: torch.Tensor,
                normed: torch.Tensor | None = None) -> torch.Tensor:
        normed = self.attn_norm(u) if normed is None else normed
        residual = normed[..., self.hidden_size:] if self.norm_before_residual else u[..., self.hidden_size:]
        x = residual + self.self_attn(normed, positions, memory, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Eagle3Head(nn.Module):
    """fc, the layer (as `layers.0`), the final norm and the draft-vocabulary head; state-dict names are the
    speculators layout's. Offers EagleHead's interface (`fuse`, `rows`, `step`, `block`, `out_norm`, `window`)."""

    def __init__(self, shape: Eagle3Shape, own_embeddings: bool, own_head: bool = True) -> None:
        super().__init__()
        self.shape, self.window = shape, UNLIMITED
        self.input_norm = RMSNorm(3 * shape.target_hidden_size, shape.eps) if shape.norm_before_fc else None
        self.fc = nn.Linear(3 * shape.target_hidden_size, shape.hidden_size, bias=False)
        self.layers = nn.ModuleList([Eagle3Layer(shape)])
        self.norm = RMSNorm(shape.hidden_size, shape.eps)
        # A published drafter has its own head over V_d ids; one trained here borrows the target's (heads/common.py).
        self.lm_head = nn.Linear(shape.hidden_size, shape.draft_vocab_size, bias=False) if own_head else None
        self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size) if own_embeddings else None

    @classmethod
    def playground(cls, target: TargetShape, heads: int, intermediate: int, num_features: int = 3,
                   window: int = UNLIMITED) -> Eagle3Head:
        """An EAGLE-3 layer to train here (tools/train/heads.py, arch `layout: "eagle3"`): the target's
        embeddings and LM head, 64-wide heads, so that `export` writes it as a speculators checkpoint. `window`
        is accepted and ignored: EAGLE-3 attends to every row."""
        if num_features != 3:
            raise ValueError("an EAGLE-3 layer reads three target layers")
        shape = Eagle3Shape(hidden_size=target.hidden_size, target_hidden_size=target.hidden_size, heads=heads,
                            kv_heads=heads, head_dim=target.hidden_size // heads, intermediate=intermediate,
                            eps=PLAYGROUND_EPS, vocab_size=target.vocab_size, draft_vocab_size=target.vocab_size,
                            layers=1, norm_before_residual=False, norm_before_fc=False,
                            rope={"rope_theta": PLAYGROUND_ROPE_THETA})
        return cls(shape, own_embeddings=False, own_head=False)

    @property
    def block(self) -> Eagle3Layer:
        layer = self.layers[0]
        assert isinstance(layer, Eagle3Layer)  # for the type checker: nn.ModuleList yields plain modules
        return layer

    @property
    def out_norm(self) -> RMSNorm:
        return self.norm

    def fuse(self, taps: torch.Tensor) -> torch.Tensor:
        """g = fc(taps) (..., T, 3 H_t) -> (..., T, H)."""
        return self.fc(self.input_norm(taps) if self.input_norm is not None else taps)

    def rows(self, embedded: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        """u = [e ; g] (..., T, 2H); the layer splits it again (the residual is g alone)."""
        return torch.cat([embedded, feature], dim=-1)

    step = EagleHead.step  # the same cached step over the layer (heads/eagle.py)


class DraftVocabParts(TargetParts):
    """The embedding table the drafter reads and its own head over V_d draft ids, spread onto the target's V."""

    def __init__(self, embedding: nn.Module, head: nn.Linear, target_ids: torch.Tensor | None, vocab_size: int):
        super().__init__(embedding, head)
        self.target_ids, self.vocab_size = target_ids, vocab_size  # (V_d,) target id of each draft id

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(..., H) -> (..., V) float32; target ids outside the draft vocabulary get -inf (probability 0)."""
        draft = self.lm_head(hidden).float()  # (..., V_d)
        if self.target_ids is None:
            return draft
        spread = draft.new_full((*draft.shape[:-1], self.vocab_size), float("-inf"))  # (..., V)
        spread[..., self.target_ids] = draft
        return spread


# ---- reading a checkpoint -----------------------------------------------------------------------


def vocabulary_map(weights: dict[str, torch.Tensor], shape: Eagle3Shape, source: str) -> torch.Tensor | None:
    """The target id of each draft id (V_d,), checked against t2d; None where the draft vocabulary is the target's
    own. Refuses a missing, out-of-range, repeated or inconsistent map in one line."""
    d2t, t2d = weights.get("d2t"), weights.get("t2d")
    Vd, V = shape.draft_vocab_size, shape.vocab_size
    regenerate = "use the d2t and t2d saved with this checkpoint (never regenerated ones) or a checkpoint that has them"
    if Vd > V:
        raise DrafterCheckpointError(f"{source!r}: draft vocabulary {Vd} is larger than the target vocabulary {V}; "
                                     "the config is wrong, download the checkpoint again.")
    if d2t is None and t2d is None and Vd == V:
        return None
    if d2t is None or t2d is None:
        absent = "d2t" if d2t is None else "t2d"
        raise DrafterCheckpointError(f"{source!r}: draft vocabulary {Vd} of {V} but no {absent} vocabulary map in its "
                                     f"weights; {regenerate}.")
    if tuple(d2t.shape) != (Vd,) or d2t.is_floating_point() or tuple(t2d.shape) != (V,):
        raise DrafterCheckpointError(f"{source!r}: d2t {tuple(d2t.shape)} / t2d {tuple(t2d.shape)} do not fit a "
                                     f"draft vocabulary of {Vd} in {V} (d2t ({Vd},) int64, t2d ({V},) bool); "
                                     f"{regenerate}.")
    target_ids = torch.arange(Vd) + d2t.long()  # (V_d,)
    if int(target_ids.min()) < 0 or int(target_ids.max()) >= V or target_ids.unique().numel() != Vd:
        raise DrafterCheckpointError(f"{source!r}: d2t maps draft ids outside 0..{V - 1} or twice onto one target "
                                     f"id, so it belongs to another vocabulary; {regenerate}.")
    marked = t2d.bool()
    if int(marked.sum()) != Vd or not bool(marked[target_ids].all()):
        raise DrafterCheckpointError(f"{source!r}: d2t and t2d disagree ({int(marked.sum())} target ids marked in "
                                     f"t2d, {Vd} draft ids in d2t); {regenerate}.")
    return None if Vd == V and bool((target_ids == torch.arange(V)).all()) else target_ids


def parse(config: dict, source: str, num_layers: int) -> tuple[Eagle3Shape, CheckpointInfo, tuple[int, ...]]:
    """Shape, what the checkpoint declares, and its tap layers, from either layout's config.json."""
    if config.get("speculators_model_type") is not None:
        if config["speculators_model_type"] != "eagle3":
            raise DrafterCheckpointError(f"{source!r} is a speculators {config['speculators_model_type']!r} model; "
                                         "this version reads speculators' eagle3 drafters.")
        shape = layer_shape(dict(config.get("transformer_layer_config") or {}), config, source)
    else:
        shape = layer_shape(config, config, source)
    info = declared(config, source, num_layers)
    assert info is not None, "an EAGLE-3 config (detect.py chose this loader)"
    info = dataclasses.replace(info, draft_vocab_size=shape.draft_vocab_size)
    return shape, info, info.tap_layers


def check_target(shape: Eagle3Shape, taps: tuple[int, ...], target: TargetShape, has_embeddings: bool,
                 source: str) -> None:
    """Refuse, in one line that says what to do, a checkpoint whose sizes or taps do not fit the loaded target."""
    fix = "load the target it was trained for, or a drafter trained for this target"
    if shape.target_hidden_size != target.hidden_size:
        raise DrafterCheckpointError(f"{source!r} reads target hidden states of size {shape.target_hidden_size}; "
                                     f"the loaded target's are {target.hidden_size}: {fix}.")
    if shape.hidden_size != target.hidden_size and not has_embeddings:
        raise DrafterCheckpointError(f"{source!r} has hidden size {shape.hidden_size} but no embed_tokens, and the "
                                     f"target's embeddings are {target.hidden_size} wide: {fix}.")
    if shape.vocab_size != target.vocab_size:
        raise DrafterCheckpointError(f"{source!r} was trained for a vocabulary of {shape.vocab_size} tokens; the loaded"
                                     f" target has {target.vocab_size}: {fix}.")
    if len(taps) != 3 or any(not 0 <= tap < target.num_layers for tap in taps):
        raise DrafterCheckpointError(f"{source!r} taps the target's hidden states {list(taps)}, but the loaded target "
                                     f"has {target.num_layers} layers (taps 0..{target.num_layers - 1}, three of "
                                     f"them): {fix}.")


def load(folder: Path, config: dict, source: str, models: LoadedModels) -> PublishedHead:
    """An EAGLE-3 checkpoint of either layout, checked against `models.target` and placed on its device."""
    target = TargetShape.of(models.target, models.num_layers)
    shape, info, taps = parse(config, source, target.num_layers)
    weights = {key.replace("midlayer.", "layers.0.", 1) if key.startswith("midlayer.") else key: value
               for key, value in read_weights(folder, WEIGHT_NAMES).items()}
    has_embeddings = "embed_tokens.weight" in weights
    check_target(shape, taps, target, has_embeddings, source)
    target_ids = vocabulary_map(weights, shape, source)
    module = Eagle3Head(shape, has_embeddings)
    check_loaded(module, {k: v for k, v in weights.items() if k not in ("d2t", "t2d")}, source, info.format)
    place(module, models)
    embedding = module.embed_tokens if module.embed_tokens is not None else models.target.get_input_embeddings()
    assert module.lm_head is not None  # a published drafter has its own head
    device = module.lm_head.weight.device
    parts = DraftVocabParts(embedding, module.lm_head, None if target_ids is None else target_ids.to(device),
                            target.vocab_size)
    head_config = HeadConfig("eagle", target, taps, {}, target_name=info.verifier)
    return PublishedHead("eagle", head_config, module, folder, info, parts, EagleDrafter,
                         verifier_notice(info, models.target_name))


# ---- writing ours ---------------------------------------------------------------------------------


def playground_taps(num_layers: int) -> tuple[int, ...]:
    """The target layers an EAGLE-3 layer trained here reads: EAGLE-3's default, which vLLM reads without ids."""
    return (2, num_layers // 2, num_layers - 3)


def export(module: Eagle3Head, config: HeadConfig, target, target_name: str, out: Path,
           speculative_tokens: int = 3) -> Path:
    """Write an EAGLE-3 layer trained here as a speculators checkpoint in `out`: config.json and
    model.safetensors with the target's embeddings and LM head (draft vocabulary = the target's, so no d2t)."""
    from safetensors.torch import save_file

    shape = module.shape
    out.mkdir(parents=True, exist_ok=True)
    weights = {name: tensor.detach().cpu().contiguous() for name, tensor in module.state_dict().items()}
    weights["lm_head.weight"] = target.get_output_embeddings().weight.detach().cpu().contiguous()
    weights["embed_tokens.weight"] = target.get_input_embeddings().weight.detach().cpu().contiguous()
    save_file(weights, str(out / "model.safetensors"))
    layer = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": shape.hidden_size,
             "intermediate_size": shape.intermediate, "num_attention_heads": shape.heads,
             "num_key_value_heads": shape.kv_heads, "head_dim": shape.head_dim, "num_hidden_layers": 1,
             "rms_norm_eps": shape.eps, "vocab_size": shape.vocab_size, "hidden_act": "silu",
             "max_position_embeddings": int(getattr(target.config, "max_position_embeddings", 2048)),
             "tie_word_embeddings": False, **shape.rope}
    verifier = {"name_or_path": target_name, "architectures": list(getattr(target.config, "architectures", []) or [])}
    speculators = {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "transformer_layer_config": layer,
        "draft_vocab_size": shape.draft_vocab_size, "norm_before_residual": shape.norm_before_residual,
        "target_hidden_size": shape.target_hidden_size, "eagle_aux_hidden_state_layer_ids": list(config.feature_layers),
        "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                               "proposal_methods": [{"proposal_type": "greedy",
                                                     "speculative_tokens": speculative_tokens}],
                               "verifier": verifier}}
    (out / "config.json").write_text(json.dumps(speculators, indent=2) + "\n")
    return out
