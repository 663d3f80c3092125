"""The build pipeline, stage by stage, each cached or resumable in ``run_dir``."""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer

from .checkpoint import atomic_torch_save, atomic_write, atomic_write_json, load_if_exists
from .config import CONFIGS, END_OF_TEXT, RunConfig
from .corpus import CorpusSplit, corpus_summary, split_documents
from .data import PackedCorpus, pack_corpus
from .evaluation import evaluate_folder
from .generation import generated_blocks
from .loop import StageResult, train_stage
from .model_card import write_card, write_playground_json
from .models import build_model, export_model, llama_config, round_to_export_precision
from .objectives import make_distill_loss, make_target_loss
from .progress import log, log_plan
from .runtime import CPU, Runtime
from .tokenizer import as_transformers_tokenizer, load_tokenizer, train_bpe


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def hardware(runtime: Runtime) -> str:
    if runtime.device == "cuda":
        return runtime.describe()
    return f"{torch.get_num_threads()} CPU threads of {cpu_name()} (machine shared with other jobs)"


def timed(timings: dict, key: str, run_dir: Path, function, *args):
    """Run a cached stage, remembering its first (uncached) duration."""
    started = time.monotonic()
    result = function(*args)
    timings.setdefault(key, time.monotonic() - started)
    atomic_write_json(run_dir / "timings.json", timings)
    return result


def cached_tokenizer(run_dir: Path, split: CorpusSplit, config: RunConfig) -> Tokenizer:
    path = run_dir / "tokenizer.json"
    if not path.exists():
        log(f"training byte-level BPE tokenizer (vocab {config.vocab_size})")
        tokenizer = train_bpe((d.text for d in split.train), config.vocab_size)
        atomic_write(path, lambda tmp: tokenizer.save(str(tmp)))
    return load_tokenizer(path)


def cached_packed_corpus(run_dir: Path, tokenizer: Tokenizer, split: CorpusSplit, config: RunConfig) -> PackedCorpus:
    path = run_dir / "packed_corpus.pt"
    saved = load_if_exists(path)
    if saved is not None:
        return PackedCorpus(train=saved["train"])
    log("tokenising and packing the corpus")
    packed = pack_corpus(tokenizer, split, config.block_size, config.seed, config.prose_repeats)
    atomic_torch_save(packed.state(), path)
    return packed


def init_run(run_dir: Path, config: RunConfig) -> tuple[RunConfig, Path] | None:
    """The run this run's target starts from (`target_init`) and its folder, or None."""
    if not config.target_init:
        return None
    init = CONFIGS[config.target_init](config.seed)
    return init, run_dir.parent / f"{init.name}-{init.target_fingerprint()}"


def share_init_data(run_dir: Path, config: RunConfig) -> None:
    """A run that starts from another's target also takes its tokenizer and packed corpus: the same token ids."""
    found = init_run(run_dir, config)
    if found is None:
        return
    source = found[1]
    for name in ("tokenizer.json", "packed_corpus.pt"):
        if (source / name).exists() and not (run_dir / name).exists():
            atomic_write(run_dir / name, lambda tmp, name=name: tmp.write_bytes((source / name).read_bytes()))


def initial_target(run_dir: Path, config: RunConfig) -> dict | None:
    """The weights this run's target starts from (`target_init`: that run's last checkpoint), or None: from
    scratch."""
    found = init_run(run_dir, config)
    if found is None:
        return None
    init, source = found
    if (init.target, init.vocab_size, init.block_size) != (config.target, config.vocab_size, config.block_size):
        raise SystemExit(f"run {config.name} starts from run {init.name}, whose target has another shape")
    saved = load_if_exists(source / "target.ckpt")
    if saved is None:
        raise SystemExit(f"run {config.name} starts from run {init.name}'s target: build it first "
                         f"(python -m tools.train.demo_models --run {init.name})")
    log(f"the target starts from run {init.name}'s at step {saved['state']['step']} of {init.target_schedule.steps}")
    return saved["model"]


def train_target(run_dir: Path, packed: PackedCorpus, config: RunConfig, eot_id: int,
                 checkpoint_seconds: float, runtime: Runtime) -> tuple[torch.nn.Module, StageResult]:
    model = build_model(llama_config(config.target, config.vocab_size, config.block_size, eot_id), config.seed)
    start = None if (run_dir / "target.ckpt").exists() else initial_target(run_dir, config)  # else it resumes
    if start is not None:
        model.load_state_dict(start)
    log(f"training target ({packed.train.shape[0]} blocks of {config.block_size} tokens)")
    result = train_stage("target", model, make_target_loss(config), packed.train,
                         config.target_schedule, config.seed, run_dir / "target.ckpt", checkpoint_seconds,
                         runtime)
    return round_to_export_precision(model), result


def distillation_blocks(run_dir: Path, packed: PackedCorpus, config: RunConfig,
                        teacher: torch.nn.Module) -> torch.Tensor:
    """The draft's training blocks (S, T): the corpus, and the target's own text repeated to its share."""
    if not config.draft_generated_blocks:
        return packed.train
    penalty = config.suggested_repetition_penalty
    log(f"the target writes {config.draft_generated_blocks} blocks of its own text for the draft "
        f"(repetition penalty {penalty})")
    suffix = "" if penalty == 1.0 else f"-rp{penalty}"
    path = run_dir / f"generated-{config.draft_generated_blocks}{suffix}.pt"  # the run folder keys target and corpus
    generated = generated_blocks(teacher, packed.train, config.draft_generated_blocks, config.seed + 2, path,
                                 penalty=penalty)
    share = config.draft_generated_share
    repeats = max(1, round(share * len(packed.train) / ((1 - share) * len(generated))))
    return torch.cat([packed.train, generated.repeat(repeats, 1)])


def train_draft(run_dir: Path, packed: PackedCorpus, config: RunConfig, teacher: torch.nn.Module,
                eot_id: int, checkpoint_seconds: float, runtime: Runtime) -> tuple[torch.nn.Module, StageResult]:
    model = build_model(llama_config(config.draft, config.vocab_size, config.block_size, eot_id), config.seed + 1)
    teacher.eval().requires_grad_(False).to(runtime.device)
    blocks = distillation_blocks(run_dir, packed, config, teacher)
    log("distilling the draft model from the target")
    # A different data seed: the draft sees the corpus in another order.
    result = train_stage("draft", model, make_distill_loss(teacher, config), blocks,
                         config.draft_schedule, config.seed + 1,
                         run_dir / f"draft-{config.draft_fingerprint()}.ckpt", checkpoint_seconds, runtime)
    teacher.to("cpu")
    return round_to_export_precision(model), result


def stage_summary(result: StageResult) -> dict:
    return dataclasses.asdict(result)


def run_build(config: RunConfig, out_dir: Path, cache_dir: Path, checkpoint_seconds: float,
              runtime: Runtime = CPU, docs_dir: Path | None = None) -> dict:
    """Build (or resume) everything and write ``out_dir``; returns the figures."""
    run_dir = cache_dir / f"{config.name}-{config.target_fingerprint()}"
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "config.json", dataclasses.asdict(config))
    timings_path = run_dir / "timings.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    log(f"run folder {run_dir}; output {out_dir}; training on {runtime.describe()}")
    log_plan(config)

    split = split_documents(config.max_train_code_files, config.max_train_prose_docs,
                            config.prose_source, docs_dir)
    share_init_data(run_dir, config)
    tokenizer = timed(timings, "tokenizer", run_dir, cached_tokenizer, run_dir, split, config)
    packed = timed(timings, "packing", run_dir, cached_packed_corpus, run_dir, tokenizer, split, config)
    eot_id = tokenizer.token_to_id(END_OF_TEXT)
    hf_tokenizer = as_transformers_tokenizer(Tokenizer.from_str(tokenizer.to_str()), config.block_size)

    target, target_result = train_target(run_dir, packed, config, eot_id, checkpoint_seconds, runtime)
    export_model(target, hf_tokenizer, out_dir / "target")
    draft, draft_result = train_draft(run_dir, packed, config, target, eot_id, checkpoint_seconds, runtime)
    export_model(draft, hf_tokenizer, out_dir / "draft")

    log("evaluating the exported models on held-out code and prose")
    started = time.monotonic()
    evaluation = evaluate_folder(out_dir, split, config.eval_blocks_per_domain, config.sample_new_tokens)
    training = {
        "hardware": hardware(runtime),
        "precision": "float32" if runtime.dtype == "float32" else "bfloat16 mixed-precision (float32 weights)",
        "torch": torch.__version__,
        "target": stage_summary(target_result),
        "draft": stage_summary(draft_result),
        "preprocessing_seconds": timings["tokenizer"] + timings["packing"],
        "total_seconds": timings["tokenizer"] + timings["packing"] + target_result.seconds + draft_result.seconds,
        "evaluation_seconds": time.monotonic() - started,
    }
    write_playground_json(out_dir, evaluation["recommended_exit"], config.seed, config.prose_source,
                          config.suggested_repetition_penalty)
    summary = corpus_summary(split, config.prose_source, docs_dir)
    write_card(out_dir, dataclasses.asdict(config), summary, training, evaluation)
    report = {"training": training, "evaluation": evaluation}
    atomic_write_json(run_dir / "report.json", report)
    return report
