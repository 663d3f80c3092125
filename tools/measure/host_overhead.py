#!/usr/bin/env python3
"""Our autoregressive loop against `generate` where the forward costs almost nothing: the host's work per token.

    python -m tools.measure.host_overhead                      # 4 layers, 64 wide, 120 tokens, 7 repeats
    python -m tools.measure.host_overhead --layers 1 --tokens 200

On a GPU a small model's step is launch-bound: the host issuing kernels and running the loop is the time, and
the GPU waits. A CPU run of a tiny model (tests/tiny_models.py) is the same regime without a GPU: each token's
time is the host's operator calls plus the loop around them. Both loops run eagerly on the same weights,
alternated, medians of ms per token and their ratio (generate's over ours: above 1, ours is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=7)
    from tools.options import add_threads

    add_threads(parser)
    args = parser.parse_args(argv)
    import torch

    from app.bench.methods import BenchPrompt, hf, ours
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models
    from tests.tiny_models import make_model, make_tokenizer

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        tokenizer = make_tokenizer(root / "tokenizer")
        target = make_model(root / "target", "llama", tokenizer, layers=args.layers, hidden=args.hidden, seed=0,
                            mute_eos=True)
        models = load_models(str(target), None, device="cpu")
    loops = {"ours": ours(SpeculativeDecoder(models), (), 4), "generate": hf(models)}
    prompt = BenchPrompt("p", "code", "def add(a, b):\n    return", args.tokens)
    for loop in loops.values():  # warm-up
        loop(prompt)
    ms: dict[str, list[float]] = {name: [] for name in loops}
    load_before = os.getloadavg()
    for _ in range(args.repeats):
        for name, loop in loops.items():
            run = loop(prompt)
            ms[name].append(1e3 * run.seconds / len(run.token_ids))
    medians = {name: round(statistics.median(values), 3) for name, values in ms.items()}
    print(json.dumps({"layers": args.layers, "hidden": args.hidden, "tokens": args.tokens,
                      "ms_per_token": medians, "generate_over_ours": round(medians["generate"] / medians["ours"], 3),
                      "load_average": [list(load_before), list(os.getloadavg())]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
