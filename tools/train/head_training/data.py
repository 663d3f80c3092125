"""The frozen target and the cached training data: its hidden states and top-k soft labels.

Self-distillation: the training text is the demo corpus the target was trained
on (CPython stdlib code and, as `HeadsRun.prose_source` says, the language
reference topics or the Python documentation, from tools/train/demo_training) plus continuations the
target writes itself from corpus prefixes (half greedy, half sampled), and
every label is the target's own next-token distribution (its top-8 probabilities)
at that position, never the corpus token. The target's hidden states and
labels are computed once and cached; each family then trains on them.

Notation: sequences of T tokens x_0 .. x_{T-1}; `label[t]` is the target's
distribution of x_{t+1} given x_0 .. x_t; `feature[l][t]` its hidden state
h^l_t (HF `hidden_states[l]`).

The target runs on the training device (``--device``), in float32 whatever
``--dtype`` says (TF32 matrix products on CUDA): the heads learn the features
and labels the engine computes. The cached data lives on the CPU; `on_device`
moves it to the GPU for training.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from app.engine.core.repetition import penalised_where

from ..demo_training.checkpoint import atomic_torch_save, load_if_exists
from ..demo_training.corpus import split_documents
from ..demo_training.data import pack_blocks, spread_blocks, training_documents
from ..demo_training.generation import continuations, device_of, greedy_rows  # noqa: F401 (greedy_rows: tests)
from .run import REPO_ROOT, HeadsRun, log

LABEL_TOP = 8  # target probabilities kept per position (soft labels)
# Rows per forward of the target for features: what keeps 2 CPU cores busy, or a GPU.
FEATURE_BATCH = {"cpu": 16, "cuda": 128}


def load_target(folder: Path, device: str = "cpu"):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval().requires_grad_(False)
    return model.to(device), AutoTokenizer.from_pretrained(folder)


def target_checksum(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.safetensors")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def display_name(folder: Path) -> str:
    """The target's folder relative to the repository when inside it (config.json stays machine-independent)."""
    folder = folder.resolve()
    return str(folder.relative_to(REPO_ROOT)) if folder.is_relative_to(REPO_ROOT) else str(folder)


def corpus_stream(tokenizer, documents) -> torch.Tensor:
    """Documents joined by the tokenizer's end-of-text token (as the demo target was trained)."""
    ids: list[int] = []
    eos = tokenizer.eos_token_id
    for encoded in tokenizer([d.text for d in documents], add_special_tokens=False)["input_ids"]:
        ids += ([eos] if eos is not None else []) + encoded
    return torch.tensor(ids, dtype=torch.long)


def corpus_blocks(tokenizer, run: HeadsRun, docs_dir: Path | None = None) -> torch.Tensor:
    split = split_documents(run.max_code_files, run.max_prose_docs, run.prose_source, docs_dir)
    documents = training_documents(split, run.seed, prose_repeats=run.prose_repeats)
    blocks = pack_blocks(corpus_stream(tokenizer, documents), run.seq_len)  # (S, T)
    return spread_blocks(blocks, run.corpus_sequences + run.generated_sequences)


def seen_at(tokens: torch.Tensor, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(B, R, V) bool: token v occurs in x_0 .. x_{positions[r]} of sequence b; tokens (B, T), positions (R,)."""
    B, T = tokens.shape
    first = torch.full((B, vocab_size), T, dtype=torch.long, device=tokens.device)  # (B, V) first occurrence
    order = torch.arange(T, device=tokens.device).expand(B, T)
    first.scatter_reduce_(1, tokens, order, reduce="amin")
    return first[:, None, :] <= positions.to(tokens.device)[None, :, None]


def penalised_logits(logits: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                     penalty: float) -> torch.Tensor:
    """Logits (B, R, V) at `positions` (R,) of tokens (B, T) under the repetition penalty of each position's
    context x_0 .. x_position, as the window applies it to the target and every drafter (1.0: untouched)."""
    if penalty == 1.0:
        return logits
    return penalised_where(logits, seen_at(tokens, positions, logits.shape[-1]), penalty)


@torch.no_grad()
def target_outputs(target, tokens: torch.Tensor, layers: tuple[int, ...], batch: int | None = None,
                   penalty: float = 1.0) -> dict:
    """Features (fp16) of `layers` and top-k soft labels for every position of tokens (S, T), on the CPU.

    The target's forward runs on its device; the labels are taken under the repetition `penalty` of each
    position's context, the softmax in float32.
    """
    device = device_of(target)
    batch = batch or FEATURE_BATCH.get(device.type, FEATURE_BATCH["cpu"])
    features = {layer: [] for layer in layers}
    label_ids, label_probs = [], []
    for chunk in tokens.split(batch):
        chunk = chunk.to(device)
        out = target(input_ids=chunk, output_hidden_states=True)
        for layer in layers:
            features[layer].append(out.hidden_states[layer].half().cpu())  # (B, T, H)
        positions = torch.arange(chunk.shape[1], device=device)
        logits = penalised_logits(out.logits.float(), chunk, positions, penalty)  # (B, T, V)
        top = torch.softmax(logits, -1).topk(LABEL_TOP, dim=-1)
        label_ids.append(top.indices.int().cpu())  # (B, T, k)
        label_probs.append(top.values.half().cpu())
    return {"tokens": tokens, "features": {layer: torch.cat(v) for layer, v in features.items()},
            "label_ids": torch.cat(label_ids), "label_probs": torch.cat(label_probs)}


def build_data(target, tokenizer, run: HeadsRun, layers: tuple[int, ...], cache: Path,
               docs_dir: Path | None = None) -> dict:
    path = cache / f"data-{run.data_fingerprint()}.pt"
    saved = load_if_exists(path)
    if saved is not None and set(saved["features"]) >= set(layers):
        return saved
    tokens_path = cache / f"tokens-{run.text_fingerprint()}.pt"
    tokens = load_if_exists(tokens_path)
    if tokens is None:
        tokens = training_text(target, tokenizer, run, docs_dir)
        atomic_torch_save(tokens, tokens_path)
    log(f"target features and labels for {tokens.numel()} tokens (labels under repetition penalty "
        f"{run.label_penalty})")
    data = target_outputs(target, tokens, layers, penalty=run.label_penalty)
    atomic_torch_save(data, path)
    return data


def training_text(target, tokenizer, run: HeadsRun, docs_dir: Path | None) -> torch.Tensor:
    """(S, T): corpus blocks, then the target's continuations of other blocks' openings."""
    blocks = corpus_blocks(tokenizer, run, docs_dir)
    generator = torch.Generator().manual_seed(run.seed)
    order = torch.randperm(len(blocks), generator=generator)
    corpus = blocks[order[: run.corpus_sequences]]
    prompts = blocks[order[run.corpus_sequences:], : run.prompt_len]
    log(f"target writes {len(prompts)} continuations of {run.seq_len - run.prompt_len} tokens "
        f"(repetition penalty {run.generation_penalty})")
    generated = continuations(target, prompts, run.seq_len - run.prompt_len, run.seed,
                              penalty=run.generation_penalty)
    return torch.cat([corpus, generated])


def on_device(data: dict, device: str) -> dict:
    """The cached data (tokens, features, labels) moved to the training device (a no-op on the CPU)."""
    if device == "cpu":
        return data
    return {key: ({k: v.to(device) for k, v in value.items()} if isinstance(value, dict) else value.to(device))
            for key, value in data.items()}


def batch_of(data: dict, indices: torch.Tensor, layers: tuple[int, ...], hard_label_weight: float = 0.0) -> tuple:
    """tokens (B, T), features [(B, T, H)] in `layers` order (float32), label ids/probs (B, T, k), on the device
    of the data.

    The labels are the target's top-k probabilities renormalised, with a share `hard_label_weight` of each moved
    onto its argmax (column 0: top-k is sorted).
    """
    rows = indices.reshape(-1).to(data["tokens"].device)
    features = [data["features"][layer][rows].float() for layer in layers]
    probs = data["label_probs"][rows].float()
    probs = (1 - hard_label_weight) * probs / probs.sum(-1, keepdim=True)
    probs[..., 0] += hard_label_weight
    return data["tokens"][rows], features, data["label_ids"][rows].long(), probs
