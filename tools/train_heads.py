#!/usr/bin/env python3
"""Train the learned drafters (Medusa, MTP, EAGLE-style, DFlash-style) against a frozen target.

    python tools/train_heads.py                       # demo target -> assets/models/demo/heads/<family>/
    python tools/train_heads.py --quick --target DIR --out DIR     # ~1 minute miniature (tests)

Self-distillation: the training text is the demo corpus (CPython stdlib code
and the language reference, from tools/demo_training) plus continuations the
target writes itself from corpus prefixes (half greedy, half sampled), and
every label is the target's own next-token distribution (its top-8 probabilities)
at that position, never the corpus token. The target's hidden states and
labels are computed once and cached; each family then trains on them.

Notation: sequences of T tokens x_0 .. x_{T-1}; `label[t]` is the target's
distribution of x_{t+1} given x_0 .. x_t; `feature[l][t]` its hidden state
h^l_t (HF `hidden_states[l]`).

Deterministic for a given --seed and thread count. Progress goes to stderr.
Data and checkpoints live under --cache-dir (keyed by a hash of the target's
weights and the configuration), written atomically, and a rerun resumes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tools")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the build never needs the hub
# Passive OpenMP waiting: spinning threads slow everything on a CPU shared with other jobs (before torch loads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from app.engine.drafters.heads import (  # noqa: E402
    FAMILIES, HeadConfig, TargetParts, TargetShape, build_module, default_config, save_head,
)
from app.engine.drafters.heads.layers import window_mask  # noqa: E402
from demo_training.checkpoint import atomic_replace_folder, atomic_torch_save, atomic_write_text, load_if_exists  # noqa: E402
from demo_training.config import StageSchedule  # noqa: E402
from demo_training.corpus import split_documents  # noqa: E402
from demo_training.data import pack_blocks, spread_blocks, training_documents  # noqa: E402
from demo_training.loop import train_stage  # noqa: E402

DEMO_TARGET = REPO_ROOT / "assets" / "models" / "demo" / "target"
DEMO_HEADS = REPO_ROOT / "assets" / "models" / "demo" / "heads"
LABEL_TOP = 8  # target probabilities kept per position (soft labels)
POSITION_DECAY = 0.8  # loss weight of draft position j is POSITION_DECAY**j: early drafts matter most


@dataclasses.dataclass(frozen=True)
class HeadsRun:
    """Every number that shapes the data and the trained heads."""

    name: str
    seed: int
    seq_len: int
    corpus_sequences: int
    generated_sequences: int  # target continuations of corpus prefixes (half greedy, half sampled)
    prompt_len: int
    max_code_files: int | None
    max_prose_docs: int | None
    schedules: dict  # family -> StageSchedule fields
    arch: dict  # family -> constructor overrides
    eagle_unroll: int = 3
    dflash_anchors: int = 32
    loss_rows: float = 0.5  # share of positions given to the LM head per step (it dominates the cost)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:10]

    def data_fingerprint(self) -> str:
        keys = ("seed", "seq_len", "corpus_sequences", "generated_sequences", "prompt_len", "max_code_files",
                "max_prose_docs")
        payload = {k: getattr(self, k) for k in keys}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:10]


def schedule(steps: int, lr: float, batch: int) -> dict:
    return dataclasses.asdict(StageSchedule(steps=steps, batch_size=batch, peak_lr=lr,
                                            warmup_steps=max(2, steps // 20), weight_decay=0.01))


def full_run(seed: int) -> HeadsRun:
    """Sized for about 20 minutes on 2 CPU cores (shared with other jobs), all four families."""
    return HeadsRun(
        name="full", seed=seed, seq_len=128, corpus_sequences=2400, generated_sequences=800, prompt_len=32,
        max_code_files=None, max_prose_docs=None,
        schedules={"medusa": schedule(1000, 3e-3, 8), "mtp": schedule(800, 2e-3, 8),
                   "eagle": schedule(900, 2e-3, 8), "dflash": schedule(1200, 2e-3, 8)},
        arch={"medusa": {"num_heads": 4}, "mtp": {"depths": 4, "intermediate": 256, "window": 16},
              "eagle": {"intermediate": 384, "window": 96},
              "dflash": {"layers": 2, "intermediate": 384, "block_size": 6, "window": 64}},
        loss_rows=0.25, dflash_anchors=16,
    )


def quick_run(seed: int) -> HeadsRun:
    """A miniature end-to-end run for the test suite."""
    return HeadsRun(
        name="quick", seed=seed, seq_len=48, corpus_sequences=12, generated_sequences=4, prompt_len=16,
        max_code_files=8, max_prose_docs=2,
        schedules={family: schedule(40, 5e-3, 4) for family in FAMILIES},
        arch={"medusa": {"num_heads": 3}, "mtp": {"depths": 2, "intermediate": 64, "window": 8},
              "eagle": {"intermediate": 64, "window": 32},
              "dflash": {"layers": 1, "intermediate": 64, "block_size": 4, "window": 16}},
        eagle_unroll=2, dflash_anchors=4,
    )


def log(message: str) -> None:
    print(f"[train-heads] {message}", file=sys.stderr, flush=True)


# ---- the frozen target and the cached data ----------------------------------------------------


def load_target(folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval().requires_grad_(False)
    return model, AutoTokenizer.from_pretrained(folder)


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


def corpus_blocks(tokenizer, run: HeadsRun) -> torch.Tensor:
    split = split_documents(run.max_code_files, run.max_prose_docs)
    documents = training_documents(split, run.seed, prose_repeats=2)
    blocks = pack_blocks(corpus_stream(tokenizer, documents), run.seq_len)  # (S, T)
    return spread_blocks(blocks, run.corpus_sequences + run.generated_sequences)


@torch.no_grad()
def continuations(target, prompts: torch.Tensor, length: int, seed: int, batch: int = 64) -> torch.Tensor:
    """The target's own text after each prompt (P,): first half greedy, second half sampled at T = 0.8.

    A plain cached loop: HF `generate` costs several times more per step at this model size.
    """
    generator = torch.Generator().manual_seed(seed)
    out = []
    for start in range(0, len(prompts), batch):
        tokens = prompts[start:start + batch]
        sample = start >= len(prompts) // 2
        step = target(input_ids=tokens, use_cache=True)
        for _ in range(length):
            logits = step.logits[:, -1].float()  # (B, V)
            if sample:
                following = torch.multinomial(torch.softmax(logits / 0.8, -1), 1, generator=generator)  # (B, 1)
            else:
                following = logits.argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, following], dim=1)
            step = target(input_ids=following, cache=step.cache, use_cache=True)
        out.append(tokens)
    return torch.cat(out)


@torch.no_grad()
def target_outputs(target, tokens: torch.Tensor, layers: tuple[int, ...], batch: int = 16) -> dict:
    """Features (fp16) of `layers` and top-k soft labels for every position of tokens (S, T)."""
    features = {layer: [] for layer in layers}
    label_ids, label_probs = [], []
    for chunk in tokens.split(batch):
        out = target(input_ids=chunk, output_hidden_states=True)
        for layer in layers:
            features[layer].append(out.hidden_states[layer].half())  # (B, T, H)
        top = torch.softmax(out.logits.float(), -1).topk(LABEL_TOP, dim=-1)
        label_ids.append(top.indices.int())  # (B, T, k)
        label_probs.append(top.values.half())
    return {"tokens": tokens, "features": {layer: torch.cat(v) for layer, v in features.items()},
            "label_ids": torch.cat(label_ids), "label_probs": torch.cat(label_probs)}


def build_data(target, tokenizer, run: HeadsRun, layers: tuple[int, ...], cache: Path) -> dict:
    path = cache / f"data-{run.data_fingerprint()}.pt"
    saved = load_if_exists(path)
    if saved is not None and set(saved["features"]) >= set(layers):
        return saved
    blocks = corpus_blocks(tokenizer, run)
    generator = torch.Generator().manual_seed(run.seed)
    order = torch.randperm(len(blocks), generator=generator)
    corpus = blocks[order[: run.corpus_sequences]]
    prompts = blocks[order[run.corpus_sequences:], : run.prompt_len]
    log(f"target writes {len(prompts)} continuations of {run.seq_len - run.prompt_len} tokens")
    generated = continuations(target, prompts, run.seq_len - run.prompt_len, run.seed)
    tokens = torch.cat([corpus, generated])  # (S, T)
    log(f"target features and labels for {tokens.numel()} tokens")
    data = target_outputs(target, tokens, layers)
    atomic_torch_save(data, path)
    return data


def batch_of(data: dict, indices: torch.Tensor, layers: tuple[int, ...]) -> tuple:
    """tokens (B, T), features [(B, T, H)] in `layers` order (float32), label ids/probs (B, T, k)."""
    rows = indices.reshape(-1)
    features = [data["features"][layer][rows].float() for layer in layers]
    probs = data["label_probs"][rows].float()
    return data["tokens"][rows], features, data["label_ids"][rows].long(), probs / probs.sum(-1, keepdim=True)


# ---- losses ------------------------------------------------------------------------------------


def soft_ce(logits: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of logits (R, V) against sparse target probabilities (R, k), weighted rows (R,)."""
    log_q = torch.log_softmax(logits.float(), -1).gather(-1, ids)  # (R, k)
    return -((probs * log_q).sum(-1) * weight).sum() / weight.sum().clamp_min(1e-6)


def sampled_rows(count: int, share: float, generator: torch.Generator) -> torch.Tensor:
    keep = max(1, int(count * share))
    return torch.randperm(count, generator=generator)[:keep].sort().values


def head_loss(parts: TargetParts, hidden: torch.Tensor, label_ids, label_probs, positions: torch.Tensor,
              valid: torch.Tensor) -> torch.Tensor:
    """Loss of hidden (B, R, H) LM-head inputs labelled by the target at `positions` (R,); `valid` (R,) bool."""
    ids = label_ids[:, positions.clamp(max=label_ids.shape[1] - 1)]  # (B, R, k)
    probs = label_probs[:, positions.clamp(max=label_probs.shape[1] - 1)]
    weight = valid.float().expand(hidden.shape[0], -1)  # (B, R)
    return soft_ce(parts.logits(hidden).flatten(0, 1), ids.flatten(0, 1), probs.flatten(0, 1), weight.flatten())


def medusa_loss(module, parts, batch, run: HeadsRun, generator) -> torch.Tensor:
    tokens, (final,), ids, probs = batch
    T = tokens.shape[1]
    rows = sampled_rows(T - 1, run.loss_rows, generator)  # positions i with at least one label
    hidden = module(final[:, rows])  # (B, R, K, H)
    total = 0.0
    for k in range(module.num_heads):  # head k at i predicts x_{i+k+2}: label at i+k+1
        target_pos = rows + k + 1
        total = total + POSITION_DECAY ** k * head_loss(parts, hidden[:, :, k], ids, probs, target_pos,
                                                        target_pos <= T - 1)
    return total


def mtp_loss(module, parts, batch, run: HeadsRun, generator) -> torch.Tensor:
    tokens, (hidden,), ids, probs = batch
    T = tokens.shape[1]
    positions = torch.arange(T)
    total = 0.0
    for d, depth in enumerate(module.depths):  # depth d+1 at i reads x_{i+d+1}, predicts x_{i+d+2}
        ahead = (positions + d + 1).clamp(max=T - 1)
        hidden = depth(hidden, parts.embed(tokens[:, ahead]), positions, module.window)  # (B, T, H)
        rows = sampled_rows(T, run.loss_rows, generator)
        target_pos = rows + d + 1
        total = total + POSITION_DECAY ** d * head_loss(parts, depth.out_norm(hidden[:, rows]), ids, probs,
                                                        target_pos, target_pos <= T - 1)
    return total


def unrolled_mask(rows: int, step: int, window: int) -> torch.Tensor:
    """Step `step` row i (position i+step) sees step-0 rows j <= i in its window and its own earlier steps."""
    base = torch.arange(rows)
    committed = window_mask(base + step, base, window) & (base[None, :] <= base[:, None])  # (R, R)
    own = torch.eye(rows, dtype=torch.bool).repeat(1, step)  # (R, step*R): row i of steps 1..step
    return torch.cat([committed, own], dim=1)


def eagle_unrolled(module, parts, tokens: torch.Tensor, features, steps: int) -> list[torch.Tensor]:
    """Outputs o (B, T-1, H) of each unrolled step; row i of step s sits at position i+s and predicts x_{i+s+2}.

    Step 0 reads the target's fused features, step s >= 1 the head's own outputs of step s-1 (training-time test).
    """
    T = tokens.shape[1]
    rows = torch.arange(T - 1)
    feature = module.fuse(torch.cat(features, -1))[:, :-1]  # (B, T-1, H)
    embedded = parts.embed(tokens)  # (B, T, H)
    memory, outputs = None, []
    for s in range(steps):
        u = module.rows(embedded[:, (rows + s + 1).clamp(max=T - 1)], feature)  # (B, T-1, H): reads x_{i+s+1}
        kv = module.block.keys_values(u, rows + s)
        memory = kv if memory is None else memory.cat(kv)
        mask = window_mask(rows, rows, module.window) if s == 0 else unrolled_mask(T - 1, s, module.window)
        feature = module.block(u, rows + s, memory, mask)  # own outputs: the next step's features
        outputs.append(feature)
    return outputs


def eagle_loss(module, parts, batch, run: HeadsRun, generator) -> torch.Tensor:
    tokens, features, ids, probs = batch
    T, total = tokens.shape[1], 0.0
    for s, output in enumerate(eagle_unrolled(module, parts, tokens, features, run.eagle_unroll)):
        picked = sampled_rows(T - 1, run.loss_rows, generator)
        target_pos = picked + s + 1
        total = total + POSITION_DECAY ** s * head_loss(parts, module.out_norm(output[:, picked]), ids, probs,
                                                        target_pos, target_pos <= T - 1)
    return total


def dflash_mask(anchors: torch.Tensor, T: int, block: int, window: int) -> torch.Tensor:
    """(A*bs, T + A*bs): block rows of anchor a see context c in [a-W, a-1] and their own block."""
    context = torch.arange(T)
    anchor_of_row = anchors.repeat_interleave(block)  # (A*bs,)
    sees_context = (context[None, :] <= anchor_of_row[:, None] - 1) & \
                   (anchor_of_row[:, None] - 1 - context[None, :] < window)
    same_block = torch.block_diag(*[torch.ones(block, block, dtype=torch.bool)] * len(anchors))
    return torch.cat([sees_context, same_block], dim=1)


def dflash_forward(module, parts, tokens: torch.Tensor, features, anchors: torch.Tensor) -> torch.Tensor:
    """Block outputs (B, A*bs, H) for anchors (A,); row j of anchor a sits at a+j and predicts x_{a+j}."""
    T, bs = tokens.shape[1], module.block_size
    context = module.context(features)  # (B, T, H)
    rows = module.block_rows(parts.embed(tokens[:, anchors])).flatten(1, 2)  # (B, A*bs, H)
    positions = anchors.repeat_interleave(bs) + torch.arange(bs).repeat(len(anchors))  # (A*bs,)
    return module(rows, positions, context, torch.arange(T), dflash_mask(anchors, T, bs, module.window))


def dflash_loss(module, parts, batch, run: HeadsRun, generator) -> torch.Tensor:
    tokens, features, ids, probs = batch
    T, bs = tokens.shape[1], module.block_size
    anchors = (torch.randperm(T - bs, generator=generator)[: run.dflash_anchors] + 1).sort().values  # in 1..T-bs
    hidden = dflash_forward(module, parts, tokens, features, anchors)
    offsets = torch.arange(bs).repeat(len(anchors))  # (A*bs,) j
    drafts = offsets > 0  # row j >= 1 predicts x_{a+j}: label at a+j-1
    weight = POSITION_DECAY ** (offsets[drafts] - 1).float()
    target_pos = (anchors.repeat_interleave(bs) + offsets)[drafts] - 1
    logits = parts.logits(hidden[:, drafts])  # (B, R, V)
    B = tokens.shape[0]
    return soft_ce(logits.flatten(0, 1), ids[:, target_pos].flatten(0, 1), probs[:, target_pos].flatten(0, 1),
                   weight.repeat(B))


LOSSES = {"medusa": medusa_loss, "mtp": mtp_loss, "eagle": eagle_loss, "dflash": dflash_loss}


# ---- one family ---------------------------------------------------------------------------------


def train_family(family: str, target, data: dict, run: HeadsRun, shape: TargetShape, target_name: str,
                 checksum: str, cache: Path, checkpoint_seconds: float) -> tuple[HeadConfig, torch.nn.Module]:
    config = default_config(family, shape, target_name, **run.arch[family])
    torch.manual_seed(run.seed)
    module = build_module(config).float()
    parts = TargetParts.of(target)
    generator = torch.Generator().manual_seed(run.seed + 1)
    loss_of = LOSSES[family]

    def loss_fn(model, indices, step):
        generator.manual_seed(run.seed * 100_003 + step)  # row choice depends only on (seed, step): resumable
        loss = loss_of(model, parts, batch_of(data, indices, config.feature_layers), run, generator)
        return loss, loss.item()

    sequences = torch.arange(len(data["tokens"]))[:, None]  # train_stage batches rows of this index table
    stage = StageSchedule(**run.schedules[family])
    result = train_stage(family, module, loss_fn, sequences, stage, run.seed,
                         cache / f"{family}-{run.fingerprint()}.ckpt", checkpoint_seconds)
    training = {"seed": run.seed, "run": run.name, "steps": result.steps, "seconds": round(result.seconds, 1),
                "final_loss": round(result.final_loss, 4), "batch_size": stage.batch_size,
                "sequences": len(data["tokens"]), "sequence_length": run.seq_len,
                "data": "stdlib code + language reference (tools/demo_training corpus) and target continuations; "
                        "labels: target top-8 probabilities",
                "target_checksum": checksum}
    return dataclasses.replace(config, training=training), module


def export(out: Path, family: str, config: HeadConfig, module: torch.nn.Module) -> None:
    atomic_replace_folder(out / family, lambda tmp: save_head(tmp, config, module))


def write_format_notes(out: Path) -> None:
    from app.engine.drafters.heads import format as head_format

    text = "# Learned drafter heads: on-disk format\n\n" + head_format.__doc__.split("\n", 1)[1].strip() + "\n"
    atomic_write_text(out / "FORMAT.md", text + FORMAT_EXTRA)


FORMAT_EXTRA = """
## Using heads with another target

Train them with `python tools/train_heads.py --target DIR --out HEADS_DIR`, then
start the app with that target and `load_models(target=DIR, heads=HEADS_DIR)`.
Loading checks hidden size, vocabulary size and layer count against the target
and refuses heads that do not fit with a message naming the difference.

## Families

- `medusa`: `heads.K.weight` (H, H), `heads.K.bias` (H,): `x + SiLU(W x + b)` per head, then the target's LM head.
- `mtp`: `depths.D.*`: norms, `proj` (H, 2H), one transformer block, `out_norm`; attention window `arch.window`.
- `eagle`: `fuse` (H, nH), `proj` (H, 2H), one transformer block, `out_norm`; window `arch.window`.
- `dflash`: `fuse` (H, nH), `context_norm`, `mask_embedding` (H,), `layers.L.*`, `out_norm`; block `arch.block_size`.

Transformer blocks are pre-norm Llama-style (RMSNorm eps 1e-6, RoPE base 10000 in
the half-split layout, attention without biases, SwiGLU MLP): `attn_norm`, `attn.{q,k,v,o}_proj`, `mlp_norm`,
`mlp.{gate,up,down}_proj`.
"""


# ---- command line -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny data, tiny heads, a few steps (tests)")
    parser.add_argument("--target", type=Path, default=DEMO_TARGET, help="target model folder (default: demo)")
    parser.add_argument("--out", type=Path, default=None, help="default: assets/models/demo/heads")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated subset of " +
                        ", ".join(FAMILIES))
    parser.add_argument("--cache-dir", type=Path, default=REPO_ROOT / ".cache" / "heads")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--checkpoint-minutes", type=float, default=2.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    run = quick_run(args.seed) if args.quick else full_run(args.seed)
    out = (args.out or DEMO_HEADS).resolve()
    target, tokenizer = load_target(args.target)
    shape = TargetShape.of(target, target.config.num_hidden_layers)
    checksum = target_checksum(args.target)
    cache = args.cache_dir.resolve() / f"{run.name}-{checksum}"
    cache.mkdir(parents=True, exist_ok=True)
    layers = tuple(sorted({i for f in families for i in default_config(f, shape).feature_layers}))
    started = time.monotonic()
    data = build_data(target, tokenizer, run, layers, cache)
    log(f"data ready in {time.monotonic() - started:.0f}s: {tuple(data['tokens'].shape)} tokens")
    summary = {}
    for family in families:
        log(f"training {family}")
        config, module = train_family(family, target, data, run, shape, display_name(args.target), checksum,
                                      cache, 60 * args.checkpoint_minutes)
        export(out, family, config, module)
        summary[family] = config.training
        log(f"{family}: {config.training['steps']} steps in {config.training['seconds']}s, "
            f"loss {config.training['final_loss']} -> {out / family}")
    write_format_notes(out)
    print(json.dumps({"out": str(out), "seconds": round(time.monotonic() - started, 1),
                      "families": {f: {"seconds": s["seconds"], "final_loss": s["final_loss"]}
                                   for f, s in summary.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
