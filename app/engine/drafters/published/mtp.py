"""MTP layers published inside a target's own checkpoint: DeepSeek-V3 / GLM-4.5 and MiMo (`num_nextn_predict_layers`),
Qwen3-Next and Qwen3.5 (`mtp_num_hidden_layers`).

Notation as in eagle3.py; f_i = h^L_i, the target's final normed hidden state (HF `hidden_states[L]`), which is
what vLLM's proposer hands the MTP layer (vllm model_executor/models/deepseek_mtp.py,
DeepSeekMultiTokenPredictorLayer). The layer's weights sit in the target's checkpoint as layer L of the model,
`model.layers.{L}.{enorm, hnorm, eh_proj, shared_head.{norm, head}, embed_tokens}` plus a decoder layer of the
target's own architecture under the same prefix (which transformers leaves unloaded):

    e_i   = emb(x_{i+1}), zero at position 0               # vLLM masks the first position
    u_i   = eh_proj [ enorm(e_i) ; hnorm(f_i) ]            # (2H -> H): the embedding first
    o_i   = DecoderLayer_L(u)_i                            # the target's layer class, causal over all rows
    z_i   = shared_head.head(shared_head.norm(o_i))        # predicts x_{i+2}

MiMo (vllm model_executor/models/mimo_mtp.py) keeps the same layer under `model.mtp_layers.0.` with other names
(`token_layernorm`, `hidden_layernorm`, `input_proj`, `final_layernorm`, the decoder layer's own beside them),
puts the hidden state first in the concatenation, and projects with the target's LM head.

Qwen3-Next / Qwen3.5 (vllm model_executor/models/qwen3_next_mtp.py and qwen3_5_mtp.py,
Qwen3NextMultiTokenPredictor) keep it under `mtp.`: `fc` for eh_proj, `pre_fc_norm_embedding` and
`pre_fc_norm_hidden` for enorm and hnorm, `layers.0.*` for the decoder layer (a full-attention one), `norm` before
the target's LM head; embeddings first in the concatenation as DeepSeek's, but no position is masked, and the norms
are the target's own class (Qwen3-Next's scale by 1 + w).

A further drafting step appends one row whose f is the previous row's o and whose token is the previous draft,
reusing the one layer (vLLM's `spec_step_idx % num_nextn_predict_layers` with one layer). The drafter keeps no
state: every step recomputes the layer over all rows (a cost that grows with the sequence; a playground for
the maths, not a serving engine). Checkpoints with more than one MTP layer are not read yet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from app.engine.drafters.base import Draft
from app.engine.drafters.heads.common import HeadConfig, HeadDrafter, TargetParts, TargetShape, as_draft, has_features
from app.engine.drafters.heads.layers import RMSNorm
from app.engine.drafters.published.checkpoint import PublishedHead, check_loaded, place, verifier_notice
from app.engine.drafters.published.formats import MTP, CheckpointInfo, mtp_layer_count
from app.engine.errors import DrafterCheckpointError
from app.engine.hf_compat import causal_mask
from app.engine.runtime.cached_model import find_layer_list

if TYPE_CHECKING:
    from app.engine.core.sampling import TokenSampler
    from app.engine.drafters.registry import Models

OWN_PARTS = ("enorm.", "hnorm.", "eh_proj.", "shared_head.", "embed_tokens.")
# MiMo's names for the same parts (its decoder layer's keys sit beside them, as DeepSeek's do).
MIMO_NAMES = {"token_layernorm.": "enorm.", "hidden_layernorm.": "hnorm.", "input_proj.": "eh_proj.",
              "final_layernorm.": "shared_head.norm."}
# Qwen3-Next's / Qwen3.5's, under `mtp.` (its decoder layer under `layers.0.`).
QWEN_NAMES = {"fc.": "eh_proj.", "pre_fc_norm_embedding.": "enorm.", "pre_fc_norm_hidden.": "hnorm.",
              "norm.": "shared_head.norm.", "layers.0.": ""}
PREFIX_NAMES = {"model.mtp_layers.0.": MIMO_NAMES, "mtp.": QWEN_NAMES}


class SharedHead(nn.Module):
    def __init__(self, hidden: int, vocab: int, eps: float, own_head: bool, norm=RMSNorm) -> None:
        super().__init__()
        self.norm = norm(hidden, eps=eps)
        self.head = nn.Linear(hidden, vocab, bias=False) if own_head else None


class MtpLayer(nn.Module):
    """enorm, hnorm, eh_proj, shared_head and the target-architecture block; names as in the checkpoint (the block's
    under `mtp_block.`, as vLLM renames them)."""

    def __init__(self, config, block: nn.Module, own_head: bool, own_embeddings: bool,
                 hidden_first: bool = False, mask_first: bool = True, norm=RMSNorm) -> None:
        """`norm`: the norm class, called (size, eps=eps); `mask_first`: zero the embedding at position 0."""
        super().__init__()
        self.hidden_first = hidden_first  # MiMo: [hidden ; token], DeepSeek and Qwen3-Next: [token ; hidden]
        self.mask_first = mask_first  # DeepSeek and MiMo mask position 0; Qwen3-Next does not
        hidden, vocab, eps = config.hidden_size, config.vocab_size, float(getattr(config, "rms_norm_eps", 1e-6))
        self.enorm, self.hnorm = norm(hidden, eps=eps), norm(hidden, eps=eps)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.shared_head = SharedHead(hidden, vocab, eps, own_head, norm)
        self.embed_tokens = nn.Embedding(vocab, hidden) if own_embeddings else None
        self.mtp_block = block
        self.target_context: tuple = ()  # the target's rotary embedding and causal-mask maker (not weights of ours)

    def forward(self, embedded: torch.Tensor, previous: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rows (T, H) of embeddings and previous states at `positions` (T,) -> outputs o (T, H)."""
        rotary, mask_of = self.target_context
        if self.mask_first:
            embedded = embedded.masked_fill((positions == 0)[:, None], 0.0)
        parts = [self.hnorm(previous), self.enorm(embedded)] if self.hidden_first else \
            [self.enorm(embedded), self.hnorm(previous)]
        u = self.eh_proj(torch.cat(parts, dim=-1))[None]  # (1, T, H)
        position_ids = positions[None]
        out = self.mtp_block(u, attention_mask=mask_of(u, position_ids), position_ids=position_ids,
                             position_embeddings=rotary(u, position_ids))
        return (out[0] if isinstance(out, tuple) else out)[0]


class MtpLayerDrafter(HeadDrafter):
    """Reads the final normed state; stateless (see the module docstring)."""

    module: MtpLayer

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler,
                features: list[torch.Tensor] | None = None) -> Draft | None:
        if not has_features(features):
            return None
        with torch.inference_mode():
            previous = features[0]  # (N-1, H): f_0 .. f_{N-2}
            tokens = ids[1: previous.shape[0] + 1].to(self.parts.device)  # x_1 .. x_{N-1}
            drafts: list[torch.Tensor] = []
            rows = []
            for _ in range(k):
                positions = torch.arange(tokens.numel(), device=previous.device)
                out = self.module(self.parts.embed(tokens), previous, positions)
                token, q = sampler.draw(self.parts.logits(self.module.shared_head.norm(out[-1])), drafts)
                drafts.append(token)
                rows.append(q)
                tokens = torch.cat([tokens, token.view(1).to(tokens.device)])
                previous = torch.cat([previous, out[-1:]])
        return as_draft(drafts, rows)


def mtp_weights(folder: Path, prefixes: tuple[str, ...], source: str) -> tuple[str, dict[str, torch.Tensor]]:
    """The first of `prefixes` found in the target's safetensors (one file or an index of shards), and every tensor
    under it, the prefix removed."""
    from safetensors import safe_open

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
    else:
        files = ["model.safetensors"] if (folder / "model.safetensors").is_file() else []
    for prefix in prefixes:
        found: dict[str, torch.Tensor] = {}
        for file in files:
            with safe_open(str(folder / file), framework="pt") as shard:
                for key in shard.keys():
                    if key.startswith(prefix):
                        found[key[len(prefix):]] = shard.get_tensor(key)
        if found:
            return prefix, found
    raise DrafterCheckpointError(f"{source!r} declares an MTP layer but its safetensors hold no "
                                 f"{' or '.join(p + '*' for p in prefixes)} weights; download the full checkpoint "
                                 "(the MTP layer ships with the target's weights).")


def renamed(key: str, names: dict[str, str]) -> str:
    """A checkpoint key (prefix removed) as MtpLayer names it, `names` mapping the layout's own name prefixes to
    DeepSeek's."""
    key = next((new + key[len(old):] for old, new in names.items() if key.startswith(old)), key)
    return key if key.startswith(OWN_PARTS) else f"mtp_block.{key}"


def block_index(target_config, layers: int) -> int:
    """The layer index the MTP decoder layer is built with: L, or for a hybrid target (Qwen3-Next's `layer_types`)
    its last full-attention layer's, whose kind the MTP layer is (vLLM builds it with layer_type="full_attention")."""
    kinds = list(getattr(target_config, "layer_types", None) or [])
    full = [i for i, kind in enumerate(kinds) if kind == "full_attention"]
    return full[-1] if kinds and full else layers


def load(folder: Path, config: dict, source: str, models: Models) -> PublishedHead:
    """The MTP layer of a DeepSeek-V3 / GLM-style checkpoint, built as the loaded target's own layer class."""
    target = TargetShape.of(models.target, models.num_layers)
    count = mtp_layer_count(config)
    config = config.get("text_config") or config  # Qwen3.5 keeps the language model's shape there
    layers = int(config.get("num_hidden_layers") or 0)
    fix = "load the target whose checkpoint this is, or give --mtp that target's folder or hub id"
    if count != 1:
        raise DrafterCheckpointError(f"{source!r} has {count} MTP layers; this version reads checkpoints with one "
                                     "(DeepSeek-V3, GLM-4.5, MiMo, Qwen3-Next, Qwen3.5).")
    if layers != target.num_layers or int(config.get("hidden_size", 0)) != target.hidden_size \
            or int(config.get("vocab_size", 0)) != target.vocab_size:
        shape = f"{target.num_layers}, {target.hidden_size}, {target.vocab_size}"
        raise DrafterCheckpointError(f"{source!r} is a checkpoint of {layers} layers, hidden size "
                                     f"{config.get('hidden_size')}, vocabulary {config.get('vocab_size')}; the loaded "
                                     f"target has {shape}: {fix}.")
    found = find_layer_list(models.target)
    assert found is not None, "the layer count above came from the target's layer list"
    base = getattr(models.target, "model", models.target)
    prefix, raw = mtp_weights(folder, (f"model.layers.{layers}.", "model.mtp_layers.0.", "mtp."), source)
    names = PREFIX_NAMES.get(prefix, {})
    weights = {renamed(key, names): value for key, value in raw.items() if not key.endswith("rotary_emb.inv_freq")}
    block = type(found[2][0])(models.target.config, block_index(models.target.config, layers))
    qwen = prefix == "mtp."
    module = MtpLayer(models.target.config, block, own_head="shared_head.head.weight" in weights,
                      own_embeddings="embed_tokens.weight" in weights, hidden_first=names is MIMO_NAMES,
                      mask_first=not qwen, norm=type(base.norm) if qwen else RMSNorm)
    check_loaded(module, weights, source, MTP)
    place(module, models)
    embedding = module.embed_tokens if module.embed_tokens is not None else models.target.get_input_embeddings()
    head = module.shared_head.head if module.shared_head.head is not None else models.target.get_output_embeddings()
    # The checkpoint is a target's own: another target's, of the same shape, loads with a notice.
    info = CheckpointInfo(MTP, "mtp", source, source, target.vocab_size, (target.num_layers,))
    head_config = HeadConfig("mtp", target, (target.num_layers,), {}, target_name=info.verifier)

    def mask_of(rows: torch.Tensor, position_ids: torch.Tensor):
        return causal_mask(models.target.config, rows, None, position_ids)

    module.target_context = (base.rotary_emb, mask_of)
    return PublishedHead("mtp", head_config, module, folder, info, TargetParts(embedding, head), MtpLayerDrafter,
                         verifier_notice(info, models.target_name))
