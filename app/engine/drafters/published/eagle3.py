"""Published EAGLE-3 drafters: SafeAILab / SpecForge checkpoints and vLLM's speculators format.

Notation as in heads/common.py (x_0 .. x_{N-1} committed, h^l_i the target's HF `hidden_states[l]` at i, H the
drafter's hidden size, H_t the target's, V the target's vocabulary, V_d the draft vocabulary). One decoder layer
(docs/ALGORITHMS.md §8.8; SafeAILab/EAGLE eagle/model/cnets.py, vllm model_executor/models/llama_eagle3.py,
speculators models/eagle3). The names, the [embedding ; hidden] order, the pre-norm residual, fc's 3 x
`target_hidden_size` (else 3H) input and the taps (modeling_llama_kv.py keeps the input of layers 2, L//2, L-3) are
cnets.py's; as its ea_model.py does, a checkpoint whose draft vocabulary is the target's ignores d2t and t2d when
d2t is all zero (the buffers cnets.py saves untouched):

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
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from app.engine.drafters.heads.common import HeadConfig, TargetParts, TargetShape
from app.engine.drafters.heads.eagle import EagleDrafter
from app.engine.drafters.published.checkpoint import (
    PublishedHead,
    check_loaded,
    place,
    read_weights,
    verifier_notice,
)
from app.engine.drafters.published.eagle3_layer import (
    Eagle3Head,
    Eagle3Shape,
    layer_shape,
)
from app.engine.drafters.published.formats import CheckpointInfo, declared
from app.engine.errors import DrafterCheckpointError

if TYPE_CHECKING:
    from app.engine.drafters.registry import Models

WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin")
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
    own (V_d = V with no d2t or an all-zero one, whatever t2d holds, as SafeAILab's cnets.py reads it). Refuses a
    missing, out-of-range, repeated or inconsistent map in one line."""
    d2t, t2d = weights.get("d2t"), weights.get("t2d")
    Vd, V = shape.draft_vocab_size, shape.vocab_size
    regenerate = "use the d2t and t2d saved with this checkpoint (never regenerated ones) or a checkpoint that has them"
    if Vd > V:
        raise DrafterCheckpointError(f"{source!r}: draft vocabulary {Vd} is larger than the target vocabulary {V}; "
                                     "the config is wrong, download the checkpoint again.")
    if Vd == V and (d2t is None or not bool(d2t.any())):
        return None  # cnets.py ignores both maps when V_d = V, and saves them as left at init (zeros)
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


def load(folder: Path, config: dict, source: str, models: Models) -> PublishedHead:
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
