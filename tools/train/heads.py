#!/usr/bin/env python3
"""Train the learned drafters (Medusa, MTP, EAGLE-style, DFlash-style) against a frozen target.

    python -m tools.train.heads                       # demo target -> assets/models/demo/heads/<family>/
    python -m tools.train.heads --quick --target DIR --out DIR     # ~1 minute miniature (tests)
    python -m tools.train.heads --target DIR --prose-source docs    # corpus prose: the Python documentation
    python -m tools.train.heads --run long --families eagle     # 3-4x the steps on twice the data, EAGLE only
    python -m tools.train.heads --run broad --families eagle    # 7x the corpus sequences, labels half on the argmax
    python -m tools.train.heads --run broad --families eagle --steps 12000 --intermediate 768   # an experiment
    python -m tools.train.heads --run broad --families eagle --init-from DIR --steps 10000 --peak-lr 1e-3 \
        --out DIR2                                    # continue DIR's head 10,000 more steps (then average_heads.py)
    python -m tools.train.heads --run broad --families eagle --corpus-sequences 28000 ...   # every corpus block
    python -m tools.train.heads --run gpu --device cuda --dtype bfloat16 --target DIR --out DIR   # GPU recipe
    python -m tools.train.heads --families eagle --eagle-layout eagle3 ...   # EAGLE-3's layer (export_heads)
    python -m tools.train.heads ...                   # the same

Self-distillation on the target's own soft labels (see tools/train/head_training/data.py), on
the corpus the target was trained on: the prose source its family folder records in
playground.json (or MODEL_CARD.md), else the pydoc topics; --prose-source overrides it.
The target's continuations in the data are written under the repetition penalty the
family suggests (--generation-penalty overrides it), and the labels are the target's
distributions under that penalty, the heads' logits scored under it too
(--label-penalty overrides it): the heads learn the text the window will ask them to
draft, and the choices its verifier will make. Each family's training forward lives beside its drafter
in app/engine/drafters/heads,
the rest of the pipeline in tools/head_training.

--device and --dtype mean what they mean for train_demo_models.py
(tools/train/demo_training/runtime.py): on CUDA the target writes its continuations
and features on the GPU (float32, TF32 products) and the heads train there,
bfloat16 mixed precision with float32 weights; the exported heads are the same
fp16 files either way and load on the CPU. --run gpu sizes the data and the
training for a few minutes of one GPU (head_training/run.py).

Deterministic for a given --seed, thread count and device. Progress goes to stderr.
Data and checkpoints live under --cache-dir (keyed by a hash of the target's
weights and the configuration, not the device), written atomically, and a rerun
resumes, on either device.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the build never needs the hub
# Passive OpenMP waiting: spinning threads slow everything on a CPU shared with other jobs (before torch loads).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from app.engine.drafters.heads import FAMILIES, TargetShape, default_config
from app.engine.loading.load import folder_repetition
from tools.options import add_threads
from tools.train.demo_training.corpus import PROSE_SOURCES
from tools.train.demo_training.model_card import recorded_prose_source
from tools.train.demo_training.python_docs import PythonDocsMissing
from tools.train.demo_training.runtime import DEVICES, DTYPES, Runtime, check_available, prepare
from tools.train.head_training.data import build_data, display_name, load_target, on_device, target_checksum
from tools.train.head_training.family import HeadInitMismatch, export, head_checksum, train_family, write_format_notes
from tools.train.head_training.run import DEMO_HEADS, DEMO_TARGET, REPO_ROOT, RUNS, HeadsRun, log, quick_run, schedule


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", choices=tuple(RUNS), default="full",
                        help="full: sized for 2 CPU cores (default); long: 3-4x its steps on twice the data; "
                             "broad: 7x the corpus sequences, labels half on the argmax, 3-13x its steps; "
                             "gpu: for a few minutes of one GPU "
                             "(needs --device cuda)")
    parser.add_argument("--quick", action="store_true", help="tiny data, tiny heads, a few steps (tests)")
    parser.add_argument("--target", type=Path, default=DEMO_TARGET, help="target model folder (default: demo)")
    parser.add_argument("--out", type=Path, default=None, help="default: assets/models/demo/heads")
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated subset of " +
                        ", ".join(FAMILIES))
    parser.add_argument("--prose-source", choices=PROSE_SOURCES, default=None,
                        help="corpus prose: pydoc (language reference topics) or docs (the installed Python "
                             "documentation); default: what the target's family folder records, else pydoc")
    parser.add_argument("--docs-dir", type=Path, default=None,
                        help="installed Python HTML documentation for --prose-source docs "
                             "(default: /usr/share/doc/pythonX.Y/html)")
    parser.add_argument("--generation-penalty", type=float, default=None,
                        help="repetition penalty the target's continuations are written under (default: the one "
                             "its family folder's playground.json suggests, else 1.0)")
    parser.add_argument("--hard-label-weight", type=float, default=None,
                        help="share of each soft label moved onto the target's argmax (default: the run's, 0.5 "
                             "for broad, else 0: the soft labels as they are); runs that differ in it alone "
                             "share their data")
    parser.add_argument("--label-penalty", type=float, default=None,
                        help="repetition penalty the labels are taken under and the heads' logits scored under "
                             "(default: the continuations' penalty, the one the window decodes the family with; "
                             "1.0: the target's plain distribution)")
    parser.add_argument("--corpus-sequences", type=int, default=None,
                        help="corpus blocks in the training text (default: the run's); the target continues the "
                             "openings of as many other blocks as the run asks, or of those the corpus has left. "
                             "New text: its data is built afresh")
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps of every family trained (default: the run's); runs that differ in "
                             "it alone share their data")
    parser.add_argument("--intermediate", type=int, default=None,
                        help="MLP width of the MTP, EAGLE and DFlash blocks (default: the run's)")
    parser.add_argument("--eagle-unroll", type=int, default=None,
                        help="EAGLE's drafting steps unrolled in training (default: the run's, 3)")
    parser.add_argument("--eagle-layout", choices=("playground", "eagle3"), default="playground",
                        help="the EAGLE head's layer: the playground's own, or EAGLE-3's (reads the target's "
                             "hidden_states[2], [L//2], [L-3]; tools.train.export_heads writes it as a speculators "
                             "checkpoint that vLLM loads) (default: playground)")
    parser.add_argument("--loss-rows", type=float, default=None,
                        help="share of positions scored by the LM head per step (default: the run's)")
    parser.add_argument("--peak-lr", type=float, default=None,
                        help="peak learning rate of every family trained (default: the run's)")
    parser.add_argument("--init-from", type=Path, default=None,
                        help="a heads folder (holding <family>/ folders of the same run's architecture) to continue "
                             "from instead of a fresh initialisation; --out must be another folder")
    parser.add_argument("--cache-dir", type=Path, default=REPO_ROOT / ".cache" / "heads")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--device", choices=DEVICES, default="cpu", help="default: cpu")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32",
                        help="training precision; bfloat16 = mixed precision (autocast), for GPUs (default: float32)")
    add_threads(parser, 2)
    parser.add_argument("--checkpoint-minutes", type=float, default=2.0)
    args = parser.parse_args(argv)
    if args.run == "gpu" and args.device != "cuda" and not args.quick:
        parser.error("--run gpu is sized for a GPU: add --device cuda (or --quick to test it on the CPU)")
    if args.init_from is not None and (args.out or DEMO_HEADS).resolve() == args.init_from.resolve():
        parser.error("--out is the --init-from folder: write the continued heads elsewhere (a rerun would "
                     "otherwise continue from its own output)")
    return args


def prose_source_of(args: argparse.Namespace) -> tuple[str, str]:
    """The corpus prose for the heads and why: the option, the target's record, or the v1 default."""
    if args.prose_source is not None:
        return args.prose_source, "--prose-source"
    recorded = recorded_prose_source(args.target)
    if recorded is not None:
        return recorded, "as the target's family folder records"
    return "pydoc", "the default: the target's folder records no corpus"


def generation_penalty_of(args: argparse.Namespace) -> tuple[float, str]:
    """The repetition penalty of the target's continuations and why: the option, or the family's suggestion."""
    if args.generation_penalty is not None:
        return args.generation_penalty, "--generation-penalty"
    return folder_repetition(args.target.parent).penalty, "as the target's family folder suggests"


def configured_run(args: argparse.Namespace) -> HeadsRun:
    """The run the options ask for, on the target's corpus prose and under its family's repetition penalty."""
    prose_source, why = prose_source_of(args)
    log(f"corpus prose: {prose_source} ({why})")
    penalty, why = generation_penalty_of(args)
    log(f"continuations and labels under repetition penalty {penalty} ({why})")
    run = (quick_run if args.quick else RUNS[args.run])(args.seed, prose_source)
    run = with_text_overrides(dataclasses.replace(run, generation_penalty=penalty, label_penalty=penalty), args)
    return with_overrides(run, args)


def with_text_overrides(run: HeadsRun, args: argparse.Namespace) -> HeadsRun:
    """The run with the options that change its training text (and so its data's key)."""
    if args.corpus_sequences is not None:
        run = dataclasses.replace(run, corpus_sequences=args.corpus_sequences)
    return run


def with_overrides(run: HeadsRun, args: argparse.Namespace) -> HeadsRun:
    """The run with the options that tune it for an experiment; the text stays the run's."""
    if args.hard_label_weight is not None:
        run = dataclasses.replace(run, hard_label_weight=args.hard_label_weight)
    if args.label_penalty is not None:
        run = dataclasses.replace(run, label_penalty=args.label_penalty)
    if args.loss_rows is not None:
        run = dataclasses.replace(run, loss_rows=args.loss_rows)
    if args.eagle_unroll is not None:
        run = dataclasses.replace(run, eagle_unroll=args.eagle_unroll)
    if getattr(args, "eagle_layout", "playground") == "eagle3":
        run = dataclasses.replace(run, arch={**run.arch, "eagle": {**run.arch["eagle"], "layout": "eagle3"}})
    if args.steps is not None or args.peak_lr is not None:
        run = dataclasses.replace(run, schedules={
            family: schedule(args.steps or s["steps"], args.peak_lr or s["peak_lr"], s["batch_size"])
            for family, s in run.schedules.items()})
    if args.intermediate is not None:
        run = dataclasses.replace(run, arch={family: {**arch, "intermediate": args.intermediate}
                                             if "intermediate" in arch else arch
                                             for family, arch in run.arch.items()})
    return run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runtime = Runtime(args.device, args.dtype)
    check_available(runtime)  # before any work: one line, no traceback
    prepare(runtime)
    torch.set_num_threads(args.threads)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    run = configured_run(args)
    if args.init_from is not None:
        missing = [f for f in families if not (args.init_from / f).is_dir()]
        if missing:
            print(f"error: --init-from {args.init_from} has no {', '.join(missing)} head folder", file=sys.stderr)
            return 2
        run = dataclasses.replace(run, head_init={f: head_checksum(args.init_from / f) for f in families})
        log(f"continuing from the heads in {args.init_from}")
    out = (args.out or DEMO_HEADS).resolve()
    log(f"run {run.name}; training on {runtime.describe()}")
    target, tokenizer = load_target(args.target, runtime.device)
    shape = TargetShape.of(target, target.config.num_hidden_layers)
    checksum = target_checksum(args.target)
    cache = args.cache_dir.resolve() / f"{run.name}-{checksum}"
    cache.mkdir(parents=True, exist_ok=True)
    layers = tuple(sorted({i for f in families for i in default_config(f, shape, **run.arch[f]).feature_layers}))
    started = time.monotonic()
    try:
        data = build_data(target, tokenizer, run, layers, cache, args.docs_dir)
    except PythonDocsMissing as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    log(f"data ready in {time.monotonic() - started:.0f}s: {tuple(data['tokens'].shape)} tokens")
    data = on_device(data, runtime.device)
    summary = {}
    for family in families:
        log(f"training {family}")
        init = None if args.init_from is None else args.init_from / family
        try:
            config, module = train_family(family, target, data, run, shape, display_name(args.target), checksum,
                                          cache, 60 * args.checkpoint_minutes, runtime, init)
        except HeadInitMismatch as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
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
