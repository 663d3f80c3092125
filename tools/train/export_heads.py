#!/usr/bin/env python3
"""Write the playground's trained heads in the formats other engines read.

    python -m tools.train.export_heads --target DIR_OR_ID --heads DIR --out DIR    # every head that has a format

    medusa -> FasterDecoding/Medusa: OUT/medusa/config.json + medusa_lm_head.pt (one residual block per head,
              the target's LM head as each head's projection): exact, loading it back drafts the same tokens.
    eagle  -> vLLM's speculators format (OUT/eagle/config.json + model.safetensors) for a head trained with
              `python -m tools.train.heads --eagle-layout eagle3` (EAGLE-3's layer): exact. The playground's own
              EAGLE layer is not written: it feeds the token embedding into its residual stream, where EAGLE-3
              carries the fused features alone, so no speculators checkpoint computes it.

The target is loaded (on the CPU unless --device says otherwise) because the export needs its LM head and checks
that the heads fit it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Families with an exact published format; the others are named with the reason they are not written.
NOT_EXPORTED = {
    "eagle": "the playground's EAGLE layer feeds the token embedding into its residual stream, EAGLE-3's carries "
             "the fused features alone: no speculators checkpoint computes it (train with --eagle-layout eagle3)",
    "mtp": "no published format holds MTP modules apart from their target's checkpoint",
    "dflash": "not exported yet",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="folder or hub id of the target the heads were trained for "
                                                        "(required)")
    parser.add_argument("--heads", required=True, help="the heads folder (one sub-folder per head) (required)")
    parser.add_argument("--out", required=True, help="where to write one sub-folder per exported head (required)")
    parser.add_argument("--device", default="cpu", help="device to load the target on (default: cpu)")
    parser.add_argument("--dtype", default="auto", help="dtype to load the target in, and of the written weights "
                                                        "(default: auto, as the app loads it)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from app.engine.drafters.heads.medusa import MedusaHeads
    from app.engine.drafters.published import eagle3, medusa
    from app.engine.errors import EngineError
    from app.engine.loading import load_models

    try:
        models = load_models(args.target, device=args.device, dtype=args.dtype, heads=args.heads)
    except EngineError as exc:
        print(f"export_heads: {exc}", file=sys.stderr)
        return 1
    for name, spec in models.heads.items():
        if name == "medusa" and isinstance(spec.module, MedusaHeads):
            folder = medusa.export(spec.module, models.target.get_output_embeddings(), args.target,
                                   Path(args.out) / name)
            print(f"[export-heads] medusa -> {folder} (FasterDecoding/Medusa)", file=sys.stderr)
        elif name == "eagle" and isinstance(spec.module, eagle3.Eagle3Head):
            folder = eagle3.export(spec.module, spec.config, models.target, args.target, Path(args.out) / name)
            print(f"[export-heads] eagle -> {folder} (speculators eagle3)", file=sys.stderr)
        else:
            print(f"[export-heads] {name}: not written: {NOT_EXPORTED.get(name, 'no format')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
