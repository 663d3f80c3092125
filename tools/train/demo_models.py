#!/usr/bin/env python3
"""Rebuild the bundled offline demo models from text available on this machine.

    python -m tools.train.demo_models                 # family v3, the bundled one (~2.7 h, one thread)
    python -m tools.train.demo_models --run v1        # the first family (~45 min)
    python -m tools.train.demo_models --run v2        # an 8 x 256 target on the same data (~2 h on 2 cores)
    python -m tools.train.demo_models --run v3-long   # v3's target trained 1000 steps further (after --run v3)
    python -m tools.train.demo_models --run v3-ul     # v3-long's target trained against its loops (after v3-long)
    python -m tools.train.demo_models --run gpu --device cuda --dtype bfloat16   # GPU recipe
    python -m tools.train.demo_models --quick --out DIR   # ~1 minute miniature (tests)

Pipeline: CPython stdlib + Python documentation corpus -> byte-level BPE tokenizer -> Llama target
trained with a LayerSkip-style early-exit loss -> small Llama draft distilled
from the target -> bfloat16 safetensors export -> held-out evaluation ->
``playground.json`` and ``MODEL_CARD.md``.

Deterministic for a given ``--seed`` (default 1234), thread count and device.
Progress with an ETA goes to stderr. Checkpoints are written atomically every
few minutes under ``--cache-dir`` (default ``~/.cache/spec-playground/
demo_training``, outside the repository; keyed by a hash of the configuration)
and a rerun of the same command resumes from them, from any checkout of the
repository, so the process may be killed at any time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tools.options import add_docs_dir, add_threads

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS = ("v1", "v2", "v3", "v3-long", "v3-ul", "gpu")
DEFAULT_RUN = "v3"  # the bundled family; demo_training.config.DEFAULT_RUN (imported only after the environment is set)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/spec-playground/demo_training`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "spec-playground" / "demo_training"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", choices=RUNS, default=DEFAULT_RUN,
                        help="which family to build: v3 (the bundled one, the default), v1 or v2 (earlier ones), "
                        "v3-long (v3's target trained further; build v3 first), v3-ul (v3-long's trained against "
                        "its loops; build v3-long first) or gpu (needs --device cuda)")
    parser.add_argument("--quick", action="store_true", help="tiny corpus slice, tiny models, few steps (~1 minute)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "assets" / "models" / "demo",
                        help="output folder (default: assets/models/demo)")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="checkpoints and cached corpus (default: ~/.cache/spec-playground/demo_training)")
    add_docs_dir(parser)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="default: cpu")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                        help="training precision; bfloat16 = mixed precision (autocast), for GPUs (default: float32)")
    parser.add_argument("--seed", type=int, default=None, help="default: 1234")
    add_threads(parser, 2)
    parser.add_argument("--checkpoint-minutes", type=float, default=3.0, help="default: 3")
    args = parser.parse_args(argv)
    if args.run == "gpu" and args.device != "cuda" and not args.quick:
        parser.error("--run gpu is sized for a GPU: add --device cuda (or --quick to test it on the CPU)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The build never needs the hub; fail fast instead of waiting on network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Passive OpenMP waiting: on a CPU shared with other jobs, spinning worker
    # threads made training up to 3x slower. Must be set before torch loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    from transformers.utils import logging as transformers_logging

    from tools.train.demo_training.build import run_build
    from tools.train.demo_training.config import DEFAULT_SEED, select_config
    from tools.train.demo_training.python_docs import PythonDocsMissing
    from tools.train.demo_training.runtime import Runtime, check_available, prepare

    runtime = Runtime(args.device, args.dtype)
    check_available(runtime)
    prepare(runtime)
    torch.set_num_threads(args.threads)
    transformers_logging.disable_progress_bar()  # keep stderr to our own progress
    seed = DEFAULT_SEED if args.seed is None else args.seed
    config = select_config(args.run, args.quick, seed)
    cache_dir = (args.cache_dir or default_cache_dir()).expanduser().resolve()
    try:
        report = run_build(config, args.out.resolve(), cache_dir, args.checkpoint_minutes * 60,
                           runtime, args.docs_dir)
    except PythonDocsMissing as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    summary = {name: report["evaluation"]["domains"]["code"][name]["agreement"]
               for name in report["evaluation"]["domains"]["code"]}
    print(json.dumps({"out": str(args.out), "code_agreement": summary,
                      "recommended_exit": report["evaluation"]["recommended_exit"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
