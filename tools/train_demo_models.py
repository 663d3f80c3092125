#!/usr/bin/env python3
"""Rebuild the bundled offline demo models from text available on this machine.

    python tools/train_demo_models.py                 # full build -> assets/models/demo/
    python tools/train_demo_models.py --quick --out DIR   # ~1 minute miniature (tests)

Pipeline: CPython stdlib corpus -> byte-level BPE tokenizer -> Llama target
trained with a LayerSkip-style early-exit loss -> small Llama draft distilled
from the target -> bfloat16 safetensors export -> held-out evaluation ->
``playground.json`` and ``MODEL_CARD.md``.

Deterministic for a given ``--seed`` (default 1234) and thread count. Progress
goes to stderr. Checkpoints are written atomically every few minutes under
``--cache-dir`` (keyed by a hash of the configuration) and a rerun resumes from
them, so the process may be killed at any time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny corpus slice, tiny models, few steps")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "assets" / "models" / "demo")
    parser.add_argument("--cache-dir", type=Path, default=REPO_ROOT / ".cache" / "demo_training")
    parser.add_argument("--seed", type=int, default=None, help="default: 1234")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--checkpoint-minutes", type=float, default=3.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # The build never needs the hub; fail fast instead of waiting on network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Passive OpenMP waiting: on a CPU shared with other jobs, spinning worker
    # threads made training up to 3x slower. Must be set before torch loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    from transformers.utils import logging as transformers_logging

    from demo_training.build import run_build
    from demo_training.config import DEFAULT_SEED, full_config, quick_config

    torch.set_num_threads(args.threads)
    transformers_logging.disable_progress_bar()  # keep stderr to our own progress
    seed = DEFAULT_SEED if args.seed is None else args.seed
    config = quick_config(seed) if args.quick else full_config(seed)
    report = run_build(config, args.out.resolve(), args.cache_dir.resolve(), args.checkpoint_minutes * 60)
    summary = {name: report["evaluation"]["domains"]["code"][name]["agreement"]
               for name in report["evaluation"]["domains"]["code"]}
    print(json.dumps({"out": str(args.out), "code_agreement": summary,
                      "recommended_exit": report["evaluation"]["recommended_exit"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
