#!/usr/bin/env python3
"""Recompute the held-out figures of the bundled demo models.

    python -m tools.train.evaluate_demo_models [--models assets/models/demo] [--json OUT]
    python -m tools.train.evaluate_demo_models --models DIR --prose-source docs   # the v2 corpus's held-out prose

Rebuilds the deterministic held-out split of the running interpreter's
standard library and of the prose the family was trained on (see
``demo_training.corpus``; the prose source its ``playground.json`` or
``MODEL_CARD.md`` records, else the pydoc topics), then reports loss,
perplexity and top-1 agreement with the target for the draft model and for
every early exit of the target, plus greedy code samples, sizes and load
times, as JSON on stdout. These are the numbers in ``MODEL_CARD.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tools.options import add_docs_dir, add_threads

REPO_ROOT = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=REPO_ROOT / "assets" / "models" / "demo")
    parser.add_argument("--eval-blocks", type=int, default=None,
                        help="held-out blocks per domain (default: as in the full build)")
    parser.add_argument("--prose-source", choices=("pydoc", "docs"), default=None,
                        help="held-out prose: pydoc (language reference topics) or docs (the installed Python "
                             "documentation); default: what the models folder records, else pydoc")
    add_docs_dir(parser)
    add_threads(parser, 2)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see train_demo_models.py
    import torch
    from transformers.utils import logging as transformers_logging

    from tools.train.demo_training.config import full_config
    from tools.train.demo_training.evaluation import evaluate_folder
    from tools.train.demo_training.model_card import heldout_split
    from tools.train.demo_training.python_docs import PythonDocsMissing

    torch.set_num_threads(args.threads)
    transformers_logging.disable_progress_bar()
    config = full_config()  # evaluation sizes: the same in every family's configuration
    blocks = args.eval_blocks or config.eval_blocks_per_domain
    try:
        prose_source, split = heldout_split(args.models, args.prose_source, args.docs_dir, "evaluate")
    except PythonDocsMissing as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    figures = evaluate_folder(args.models, split, blocks, config.sample_new_tokens)
    figures["prose_source"] = prose_source
    text = json.dumps(figures, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
