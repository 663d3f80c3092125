"""Tiny random published drafter checkpoints, written at test time in exactly the published layouts, and an
independent reference forward of each, written from the published model code's structure (SafeAILab/EAGLE
eagle/model/cnets.py and speculators' Eagle3 first layer), not from the loader's modules.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from tests.tiny_models import make_model, make_tokenizer

HEADS, KV_HEADS, INTERMEDIATE = 4, 2, 96
LAYER_KEYS = ("hidden_norm.weight", "input_layernorm.weight", "post_attention_layernorm.weight",
              "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
              "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")


def tiny_target(root: Path, layers: int = 8, hidden: int = 64) -> Path:
    """A tiny random Llama target deep enough for EAGLE-3's default taps (2, L//2, L-3)."""
    tokenizer = make_tokenizer(root / "tokenizer")
    return make_model(root / "target", "llama", tokenizer, layers=layers, hidden=hidden, seed=3, mute_eos=True)


def vocab_map(vocab: int, draft_vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(d2t (V_d,) int64, t2d (V,) bool) for a random sorted subset of target ids, as SpecForge writes them."""
    generator = torch.Generator().manual_seed(seed)
    kept = torch.randperm(vocab, generator=generator)[:draft_vocab].sort().values  # (V_d,)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[kept] = True
    return kept - torch.arange(draft_vocab), t2d


def eagle3_weights(hidden: int, vocab: int, draft_vocab: int, seed: int, own_embeddings: bool,
                   norm_before_fc: bool = False) -> dict[str, torch.Tensor]:
    """Random weights with the speculators names (`layers.0.*`); SpecForge's differ only by `midlayer.`."""
    generator = torch.Generator().manual_seed(seed)
    head_dim = hidden // HEADS

    def rand(*shape, scale=None):
        fan_in = shape[-1]
        return torch.randn(*shape, generator=generator) * (scale or 1 / math.sqrt(fan_in))

    def norm(size):
        return 1 + 0.1 * torch.randn(size, generator=generator)

    layer = {
        "hidden_norm.weight": norm(hidden), "input_layernorm.weight": norm(hidden),
        "post_attention_layernorm.weight": norm(hidden),
        "self_attn.q_proj.weight": rand(HEADS * head_dim, 2 * hidden),
        "self_attn.k_proj.weight": rand(KV_HEADS * head_dim, 2 * hidden),
        "self_attn.v_proj.weight": rand(KV_HEADS * head_dim, 2 * hidden),
        "self_attn.o_proj.weight": rand(hidden, HEADS * head_dim),
        "mlp.gate_proj.weight": rand(INTERMEDIATE, hidden), "mlp.up_proj.weight": rand(INTERMEDIATE, hidden),
        "mlp.down_proj.weight": rand(hidden, INTERMEDIATE)}
    weights = {f"layers.0.{key}": value for key, value in layer.items()}
    weights.update({"fc.weight": rand(hidden, 3 * hidden), "norm.weight": norm(hidden),
                    "lm_head.weight": rand(draft_vocab, hidden, scale=8 / math.sqrt(hidden))})
    if own_embeddings:
        weights["embed_tokens.weight"] = rand(vocab, hidden, scale=1.0)
    if norm_before_fc:
        weights["input_norm.weight"] = norm(3 * hidden)
    return weights


def llama_layer_config(hidden: int, vocab: int) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
            "intermediate_size": INTERMEDIATE, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "num_hidden_layers": 1, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 2048,
            "vocab_size": vocab, "hidden_act": "silu", "tie_word_embeddings": False}


def write_specforge(folder: Path, weights: dict[str, torch.Tensor], hidden: int, vocab: int, draft_vocab: int,
                    aux_ids: list[int] | None = None, safetensors: bool = False) -> Path:
    """SafeAILab / SpecForge layout: flat Llama config, `midlayer.*`, no embed_tokens, pytorch_model.bin."""
    folder.mkdir(parents=True, exist_ok=True)
    config = dict(llama_layer_config(hidden, vocab), architectures=["LlamaForCausalLMEagle3"],
                  draft_vocab_size=draft_vocab)
    if aux_ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": aux_ids, "use_aux_hidden_state": True}
    (folder / "config.json").write_text(json.dumps(config))
    renamed = {key.replace("layers.0.", "midlayer.", 1): value for key, value in weights.items()}
    if safetensors:
        save_file({k: v.contiguous() for k, v in renamed.items()}, str(folder / "model.safetensors"))
    else:
        torch.save(renamed, folder / "pytorch_model.bin")
    return folder


def write_speculators(folder: Path, weights: dict[str, torch.Tensor], hidden: int, vocab: int, draft_vocab: int,
                      verifier: str, aux_ids: list[int] | None = None, norm_before_residual: bool = False,
                      norm_before_fc: bool = False) -> Path:
    """vLLM's speculators layout: `speculators_model_type`, transformer_layer_config, `layers.0.*`, safetensors."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
              "speculators_version": "0.1.0", "transformer_layer_config": llama_layer_config(hidden, vocab),
              "draft_vocab_size": draft_vocab, "norm_before_residual": norm_before_residual,
              "norm_before_fc": norm_before_fc, "target_hidden_size": hidden,
              "eagle_aux_hidden_state_layer_ids": aux_ids,
              "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                     "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
                                     "verifier": {"name_or_path": verifier, "architectures": ["LlamaForCausalLM"]}}}
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    return folder


# ---- the reference forward ------------------------------------------------------------------------


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


class ReferenceEagle3:
    """cnets.py's Model.forward + topK_genrate's chain, written out: every step recomputes all rows."""

    def __init__(self, weights: dict[str, torch.Tensor], hidden: int, taps: tuple[int, ...],
                 target_ids: torch.Tensor | None, vocab: int, norm_before_residual: bool = False):
        self.w = {k: v.float() for k, v in weights.items()}
        self.hidden, self.taps, self.target_ids, self.vocab = hidden, taps, target_ids, vocab
        self.norm_before_residual = norm_before_residual
        self.eps = 1e-5  # llama_layer_config's
        config = LlamaConfig(**llama_layer_config(hidden, vocab))
        self.rotary = LlamaRotaryEmbedding(config)

    def layer(self, embedded: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """(T, H) embeddings and (T, H) hidden rows -> (T, H) pre-norm outputs, causal over the T rows."""
        w = self.w
        normed_hidden = rms(hidden, w["layers.0.hidden_norm.weight"])
        residual = normed_hidden if self.norm_before_residual else hidden
        x = torch.cat([rms(embedded, w["layers.0.input_layernorm.weight"]), normed_hidden], -1)  # (T, 2H)
        return self.attention_and_mlp(x, residual)

    def attention_and_mlp(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """Llama's causal attention over rows x (T, n H) added to `residual`, then the post-norm MLP."""
        w, T, head_dim = self.w, x.shape[0], self.hidden // HEADS
        q = (x @ w["layers.0.self_attn.q_proj.weight"].T).view(1, T, HEADS, head_dim).transpose(1, 2)
        k = (x @ w["layers.0.self_attn.k_proj.weight"].T).view(1, T, KV_HEADS, head_dim).transpose(1, 2)
        v = (x @ w["layers.0.self_attn.v_proj.weight"].T).view(1, T, KV_HEADS, head_dim).transpose(1, 2)
        cos, sin = self.rotary(v, torch.arange(T)[None])
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = k.repeat_interleave(HEADS // KV_HEADS, 1), v.repeat_interleave(HEADS // KV_HEADS, 1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)  # (1, heads, T, T)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(T, HEADS * head_dim)
        x = residual + attended @ w["layers.0.self_attn.o_proj.weight"].T
        h = rms(x, w["layers.0.post_attention_layernorm.weight"], self.eps)
        gate, up = h @ w["layers.0.mlp.gate_proj.weight"].T, h @ w["layers.0.mlp.up_proj.weight"].T
        mlp = torch.nn.functional.silu(gate) * up
        return x + mlp @ w["layers.0.mlp.down_proj.weight"].T

    def target_logits(self, out: torch.Tensor) -> torch.Tensor:
        """(H,) -> (V,): the draft head spread onto the target vocabulary with -inf elsewhere (vLLM)."""
        draft = rms(out, self.w["norm.weight"]) @ self.w["lm_head.weight"].T  # (V_d,)
        if self.target_ids is None:
            return draft
        full = torch.full((self.vocab,), float("-inf"))
        full[self.target_ids] = draft
        return full

    def features(self, states, taps) -> torch.Tensor:
        """The layer's hidden rows from the target's HF hidden_states: fc over the taps, low first."""
        fused = torch.cat([states[i][0, :-1].float() for i in taps], -1)  # (N-1, 3H)
        if "input_norm.weight" in self.w:
            fused = rms(fused, self.w["input_norm.weight"])
        return fused @ self.w["fc.weight"].T

    def chain(self, target, ids: torch.Tensor, k: int) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy chain of k drafts after `ids` and each step's (V,) logits."""
        with torch.no_grad():
            states = target(ids[None], output_hidden_states=True).hidden_states
            embed = self.w.get("embed_tokens.weight", target.get_input_embeddings().weight.float())
        hidden = self.features(states, self.taps)  # (N-1, H): rows 0 .. N-2
        tokens = ids[1:].tolist()  # row i reads x_{i+1}
        drafts, rows = [], []
        for _ in range(k):
            out = self.layer(embed[torch.tensor(tokens)], hidden)  # (T, H)
            logits = self.target_logits(out[-1])
            token = int(logits.argmax())
            drafts.append(token)
            rows.append(logits)
            tokens.append(token)
            hidden = torch.cat([hidden, out[-1:]])  # the next row's hidden is this row's pre-norm output
        return drafts, rows


# ---- Medusa (FasterDecoding/Medusa medusa/model/medusa_model.py) -----------------------------------


def medusa_weights(hidden: int, vocab: int, heads: int, layers: int, seed: int) -> dict[str, torch.Tensor]:
    """`{k}.{l}.linear.{weight,bias}` (one block repeated per head, as MedusaModel builds it) and `{k}.{L}.weight`."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for k in range(heads):
        weight = torch.randn(hidden, hidden, generator=generator) / math.sqrt(hidden)
        bias = 0.1 * torch.randn(hidden, generator=generator)
        for layer in range(layers):
            weights[f"{k}.{layer}.linear.weight"], weights[f"{k}.{layer}.linear.bias"] = weight, bias
        weights[f"{k}.{layers}.weight"] = torch.randn(vocab, hidden, generator=generator) * 8 / math.sqrt(hidden)
    return weights


def write_medusa(folder: Path, weights: dict[str, torch.Tensor], heads: int, layers: int, verifier: str,
                 layout: str = "pt") -> Path:
    """layout "pt": medusa_lm_head.pt; "safetensors": medusa_lm_head.safetensors; "full": a full model's
    model.safetensors with the heads under `medusa_head.` (and a stand-in base weight beside them)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"medusa_num_heads": heads, "medusa_num_layers": layers, "base_model_name_or_path": verifier}
    (folder / "config.json").write_text(json.dumps(config))
    copies = {key: value.clone().contiguous() for key, value in weights.items()}
    if layout == "pt":
        torch.save(copies, folder / "medusa_lm_head.pt")
    elif layout == "safetensors":
        save_file(copies, str(folder / "medusa_lm_head.safetensors"))
    else:
        full = {f"medusa_head.{key}": value for key, value in copies.items()}
        full["model.norm.weight"] = torch.ones(4)
        save_file(full, str(folder / "model.safetensors"))
    return folder


def reference_medusa_logits(weights: dict[str, torch.Tensor], heads: int, layers: int,
                            hidden: torch.Tensor) -> torch.Tensor:
    """(H,) last normed hidden state -> (K, V): each head's residual blocks, then its own projection."""
    rows = []
    for k in range(heads):
        x = hidden.float()
        for layer in range(layers):
            x = x + torch.nn.functional.silu(x @ weights[f"{k}.{layer}.linear.weight"].float().T
                                             + weights[f"{k}.{layer}.linear.bias"].float())
        rows.append(x @ weights[f"{k}.{layers}.weight"].float().T)
    return torch.stack(rows)


# ---- EAGLE-1/2 (SafeAILab/EAGLE eagle/model/cnets1.py) --------------------------------------------


def eagle1_weights(hidden: int, vocab: int, seed: int, own_embeddings: bool) -> dict[str, torch.Tensor]:
    """cnets1.py's Model state dict: fc (H, 2H) with bias, layer 0 without input_layernorm, no norm, no head."""
    weights = eagle3_weights(hidden, vocab, vocab, seed, own_embeddings)
    generator = torch.Generator().manual_seed(seed + 100)
    head_dim = hidden // HEADS
    for name, rows in (("q_proj", HEADS), ("k_proj", KV_HEADS), ("v_proj", KV_HEADS)):
        weights[f"layers.0.self_attn.{name}.weight"] = torch.randn(rows * head_dim, hidden,
                                                                   generator=generator) / math.sqrt(hidden)
    for dropped in ("layers.0.hidden_norm.weight", "layers.0.input_layernorm.weight", "norm.weight", "lm_head.weight"):
        del weights[dropped]
    weights["fc.weight"] = torch.randn(hidden, 2 * hidden, generator=generator) / math.sqrt(2 * hidden)
    weights["fc.bias"] = 0.1 * torch.randn(hidden, generator=generator)
    return weights


def write_eagle1(folder: Path, weights: dict[str, torch.Tensor], hidden: int, vocab: int) -> Path:
    """A plain one-layer Llama config and pytorch_model.bin, as the EAGLE-1/2 checkpoints are published."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(llama_layer_config(hidden, vocab)))
    torch.save({**weights, "layers.0.self_attn.rotary_emb.inv_freq": torch.ones(hidden // HEADS // 2)},
               folder / "pytorch_model.bin")
    return folder


class ReferenceEagle1(ReferenceEagle3):
    """cnets1.py's Model.forward and chain: fc over [e ; f], layer 0 without input norm, the target's head."""

    def __init__(self, weights, hidden: int, vocab: int, lm_head: torch.Tensor):
        super().__init__(weights, hidden, (), None, vocab)
        self.lm_head = lm_head.float()

    def layer(self, embedded: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        x = torch.cat([embedded, hidden], -1) @ self.w["fc.weight"].T + self.w["fc.bias"]  # (T, H)
        return self.attention_and_mlp(x, x)  # no input norm: attention reads fc's output, the residual too

    def target_logits(self, out: torch.Tensor) -> torch.Tensor:
        return out @ self.lm_head.T

    def features(self, states, taps) -> torch.Tensor:
        return states[-1][0, :-1].float()  # the final normed state, rows 0 .. N-2


# ---- MTP inside a target checkpoint (vllm model_executor/models/deepseek_mtp.py) -------------------


MIMO_KEYS = {"enorm.weight": "token_layernorm.weight", "hnorm.weight": "hidden_layernorm.weight",
             "eh_proj.weight": "input_proj.weight", "shared_head.norm.weight": "final_layernorm.weight"}


QWEN_KEYS = {"enorm.weight": "pre_fc_norm_embedding.weight", "hnorm.weight": "pre_fc_norm_hidden.weight",
             "eh_proj.weight": "fc.weight", "shared_head.norm.weight": "norm.weight"}


def write_mtp_target(root: Path, layers: int = 4, hidden: int = 64, seed: int = 11,
                     mimo: bool = False, qwen: bool = False) -> tuple[Path, dict]:
    """A tiny Llama target whose checkpoint carries one MTP layer as `model.layers.{L}.*` (DeepSeek-V3 / GLM
    layout: enorm, hnorm, eh_proj, shared_head.{norm, head} and a decoder layer of the target's class), and
    `num_nextn_predict_layers: 1` in its config; `mimo`: as `model.mtp_layers.0.*` with MiMo's names and no head
    of its own; `qwen`: Qwen3-Next's (vllm qwen3_next_mtp.py), `mtp.{fc, pre_fc_norm_embedding, pre_fc_norm_hidden,
    layers.0.*, norm}` with `mtp_num_hidden_layers: 1` and no head of its own. Returns the folder and the MTP weights
    (prefix removed, DeepSeek's names)."""
    from safetensors.torch import load_file

    tokenizer = make_tokenizer(root / "tokenizer")
    folder = make_model(root / "target", "llama", tokenizer, layers=layers, hidden=hidden, seed=seed, mute_eos=True)
    config = json.loads((folder / "config.json").read_text())
    config["mtp_num_hidden_layers" if qwen else "num_nextn_predict_layers"] = 1
    (folder / "config.json").write_text(json.dumps(config))
    generator = torch.Generator().manual_seed(seed)
    vocab, inner, head_dim = config["vocab_size"], config["intermediate_size"], hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"]

    def rand(*shape, scale=None):
        return torch.randn(*shape, generator=generator) * (scale or 1 / math.sqrt(shape[-1]))

    def norm(size):
        return 1 + 0.1 * torch.randn(size, generator=generator)

    mtp = {"enorm.weight": norm(hidden), "hnorm.weight": norm(hidden), "eh_proj.weight": rand(hidden, 2 * hidden),
           "shared_head.norm.weight": norm(hidden), "shared_head.head.weight": rand(vocab, hidden, scale=0.5),
           "input_layernorm.weight": norm(hidden), "post_attention_layernorm.weight": norm(hidden),
           "self_attn.q_proj.weight": rand(hidden, hidden), "self_attn.k_proj.weight": rand(kv * head_dim, hidden),
           "self_attn.v_proj.weight": rand(kv * head_dim, hidden), "self_attn.o_proj.weight": rand(hidden, hidden),
           "mlp.gate_proj.weight": rand(inner, hidden), "mlp.up_proj.weight": rand(inner, hidden),
           "mlp.down_proj.weight": rand(hidden, inner)}
    weights = load_file(str(folder / "model.safetensors"))
    if mimo or qwen:
        del mtp["shared_head.head.weight"]  # MiMo and Qwen3-Next project with the target's LM head
    if qwen:
        weights.update({f"mtp.{QWEN_KEYS[key]}" if key in QWEN_KEYS else f"mtp.layers.0.{key}": value
                        for key, value in mtp.items()})
    elif mimo:
        weights.update({f"model.mtp_layers.0.{MIMO_KEYS.get(key, key)}": value for key, value in mtp.items()})
    else:
        weights.update({f"model.layers.{layers}.{key}": value for key, value in mtp.items()})
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder, mtp


class ReferenceMtp(ReferenceEagle3):
    """deepseek_mtp.py's layer written out: embeddings zeroed at position 0, eh_proj over [enorm(e) ; hnorm(f)],
    a Llama decoder layer, shared_head; each step recomputes every row."""

    def __init__(self, mtp: dict[str, torch.Tensor], hidden: int, vocab: int, eps: float,
                 lm_head: torch.Tensor | None = None, qwen: bool = False):
        """`lm_head`: MiMo's layout (the hidden state first, the target's head), or with `qwen` Qwen3-Next's (the
        embedding first, no position masked, the target's head); None: DeepSeek's."""
        block = {f"layers.0.{k}": v for k, v in mtp.items() if k.startswith(("self_attn", "mlp", "post_attention"))}
        super().__init__({**mtp, **block}, hidden, (), None, vocab)
        self.eps, self.lm_head, self.qwen = eps, None if lm_head is None else lm_head.float(), qwen

    def layer(self, embedded: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        w = self.w
        embedded = embedded.clone()
        if not self.qwen:
            embedded[0] = 0.0  # row 0 sits at position 0
        token, state = rms(embedded, w["enorm.weight"], self.eps), rms(hidden, w["hnorm.weight"], self.eps)
        hidden_first = self.lm_head is not None and not self.qwen
        u = torch.cat([state, token] if hidden_first else [token, state], -1) @ w["eh_proj.weight"].T
        return self.attention_and_mlp(rms(u, w["input_layernorm.weight"], self.eps), u)

    def target_logits(self, out: torch.Tensor) -> torch.Tensor:
        head = self.lm_head if self.lm_head is not None else self.w["shared_head.head.weight"]
        return rms(out, self.w["shared_head.norm.weight"], self.eps) @ head.T

    def features(self, states, taps) -> torch.Tensor:
        return states[-1][0, :-1].float()  # the final normed state, rows 0 .. N-2


# ---- DFlash (z-lab/dflash dflash/model.py, DFlashDraftModel) ----------------------------------------


def dflash_weights(hidden: int, layers: int, taps: int, seed: int) -> dict[str, torch.Tensor]:
    """DFlashDraftModel's state dict: fc, hidden_norm, layers.{i}.{self_attn.{q,k,v,o}_proj, q_norm, k_norm, mlp,
    input_layernorm, post_attention_layernorm}, norm; no embeddings, no head."""
    generator = torch.Generator().manual_seed(seed)
    head_dim = hidden // HEADS

    def rand(*shape):
        return torch.randn(*shape, generator=generator) / math.sqrt(shape[-1])

    def norm(size):
        return 1 + 0.1 * torch.randn(size, generator=generator)

    weights = {"fc.weight": rand(hidden, taps * hidden), "hidden_norm.weight": norm(hidden),
               "norm.weight": norm(hidden)}
    for i in range(layers):
        weights.update({f"layers.{i}.{key}": value for key, value in {
            "self_attn.q_proj.weight": rand(HEADS * head_dim, hidden),
            "self_attn.k_proj.weight": rand(KV_HEADS * head_dim, hidden),
            "self_attn.v_proj.weight": rand(KV_HEADS * head_dim, hidden),
            "self_attn.o_proj.weight": rand(hidden, HEADS * head_dim),
            "self_attn.q_norm.weight": norm(head_dim), "self_attn.k_norm.weight": norm(head_dim),
            "mlp.gate_proj.weight": rand(INTERMEDIATE, hidden), "mlp.up_proj.weight": rand(INTERMEDIATE, hidden),
            "mlp.down_proj.weight": rand(hidden, INTERMEDIATE), "input_layernorm.weight": norm(hidden),
            "post_attention_layernorm.weight": norm(hidden)}.items()})
    return weights


def write_dflash(folder: Path, weights: dict[str, torch.Tensor], hidden: int, vocab: int, layers: int,
                 target_layer_ids: list[int] | None, block_size: int, mask_token_id: int,
                 num_target_layers: int) -> Path:
    """A z-lab DFlash checkpoint: a Qwen3 config with block_size, num_target_layers and dflash_config."""
    folder.mkdir(parents=True, exist_ok=True)
    dflash_config: dict = {"mask_token_id": mask_token_id}
    if target_layer_ids is not None:
        dflash_config["target_layer_ids"] = target_layer_ids
    config = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": hidden,
              "intermediate_size": INTERMEDIATE, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "head_dim": hidden // HEADS, "num_hidden_layers": layers, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "vocab_size": vocab, "hidden_act": "silu", "max_position_embeddings": 2048, "block_size": block_size,
              "num_target_layers": num_target_layers, "dflash_config": dflash_config}
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    return folder


class ReferenceDFlash:
    """dflash/model.py's DFlashDraftModel.forward and dflash_generate's block step, written out for one block over
    the whole context (the cache it keeps holds the same context rows)."""

    def __init__(self, weights: dict[str, torch.Tensor], layers: int, taps: list[int], block_size: int,
                 mask_token_id: int, theta: float = 10000.0):
        self.w = {k: v.float() for k, v in weights.items()}
        self.layers, self.taps, self.block_size, self.mask = layers, taps, block_size, mask_token_id
        self.theta, self.eps = theta, 1e-6

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x (heads, T, d) rotated by RoPE at `positions` (T,), halves rotated (rotate_half)."""
        d = x.shape[-1]
        angles = positions[:, None].float() / self.theta ** (torch.arange(0, d, 2).float() / d)  # (T, d/2)
        cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def block_logits(self, target, ids: torch.Tensor) -> torch.Tensor:
        """(bs-1, V): the block [x_{N-1}, mask...] after `ids` (N,), the context from the target's states."""
        w, p, bs = self.w, "layers.{}.", self.block_size
        with torch.no_grad():
            states = target(ids[None, :-1], output_hidden_states=True).hidden_states
            block_ids = torch.tensor([int(ids[-1])] + [self.mask] * (bs - 1))
            x = target.get_input_embeddings()(block_ids).float()  # (bs, H)
        context = rms(torch.cat([states[i + 1][0].float() for i in self.taps], -1) @ w["fc.weight"].T,
                      w["hidden_norm.weight"], self.eps)  # (Tc, H)
        tc, head_dim = context.shape[0], x.shape[1] // HEADS
        positions = torch.arange(tc + bs)
        for i in range(self.layers):
            def lw(name, i=i):
                return w[p.format(i) + name]
            h = rms(x, lw("input_layernorm.weight"), self.eps)
            both = torch.cat([context, h])
            q = rms((h @ lw("self_attn.q_proj.weight").T).view(bs, HEADS, head_dim), lw("self_attn.q_norm.weight"),
                    self.eps).transpose(0, 1)
            k = rms((both @ lw("self_attn.k_proj.weight").T).view(tc + bs, KV_HEADS, head_dim),
                    lw("self_attn.k_norm.weight"), self.eps).transpose(0, 1)
            v = (both @ lw("self_attn.v_proj.weight").T).view(tc + bs, KV_HEADS, head_dim).transpose(0, 1)
            q, k = self.rope(q, positions[-bs:]), self.rope(k, positions)
            k, v = k.repeat_interleave(HEADS // KV_HEADS, 0), v.repeat_interleave(HEADS // KV_HEADS, 0)
            attended = ((q @ k.transpose(-1, -2)) / math.sqrt(head_dim)).softmax(-1) @ v  # every row sees all
            x = x + attended.transpose(0, 1).reshape(bs, -1) @ lw("self_attn.o_proj.weight").T
            h = rms(x, lw("post_attention_layernorm.weight"), self.eps)
            x = x + (torch.nn.functional.silu(h @ lw("mlp.gate_proj.weight").T) * (h @ lw("mlp.up_proj.weight").T)) \
                @ lw("mlp.down_proj.weight").T
        return rms(x, w["norm.weight"], self.eps)[1:] @ target.get_output_embeddings().weight.float().T
