#!/usr/bin/env python3
"""Average the weights of learned heads of one architecture (a "model soup", Wortsman et al. 2022).

    python -m tools.train.average_heads --family eagle --heads HEADS_A --heads HEADS_B --out DIR

Each --heads is a heads folder holding <family>/ (config.json and model.safetensors, as
tools/train/heads.py writes them). The heads must share the family, the architecture, the feature
layers and the target. The average is taken in float32 and written as the same fp16 files, under
DIR/<family>/, with the first head's config; its training record lists every averaged head.

A head continued from another (`train_heads.py --init-from`) and the head it started from lie in
one basin of the loss, so their average is a working head of its own, and can draft better than
either. The demo family's EAGLE head is made that way (docs/notes/V2_PLAN.md, "Longer
training, and averaged heads" and "Every corpus block"; about 2.5 hours of one CPU thread and 40 minutes
of two):

    python -m tools.train.heads --run broad --families eagle --out H1
    python -m tools.train.heads --run broad --families eagle --init-from H1 --steps 10000 --peak-lr 1e-3 --out H2
    python -m tools.train.average_heads --family eagle --heads H1 --heads H2 --out H3
    python -m tools.train.heads --run broad --families eagle --init-from H3 --corpus-sequences 28000 \
        --steps 3000 --peak-lr 1e-3 --out H4
    python -m tools.train.average_heads --family eagle --heads H3 --heads H4 --out assets/models/demo/heads
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.engine.drafters.heads import FAMILIES
from app.engine.errors import ModelLoadError
from tools.train.head_training.family import HeadInitMismatch, averaged_head, export


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=tuple(FAMILIES), required=True)
    parser.add_argument("--heads", type=Path, action="append", required=True,
                        help="a heads folder holding <family>/; give two or more")
    parser.add_argument("--out", type=Path, required=True, help="heads folder to write <family>/ into")
    args = parser.parse_args(argv)
    if len(args.heads) < 2:
        parser.error("give --heads at least twice: an average of one head is that head")
    if any(args.out.resolve() == folder.resolve() for folder in args.heads):
        parser.error("--out is one of the averaged folders: write the average elsewhere")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config, module = averaged_head([folder / args.family for folder in args.heads])
    except (HeadInitMismatch, ModelLoadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    export(args.out, args.family, config, module)
    print(f"{args.family}: the average of {len(args.heads)} heads -> {args.out / args.family}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
