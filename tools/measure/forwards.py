#!/usr/bin/env python3
"""Time single forwards of two execution modes alternated one by one on the same weights.

    python -m tools.measure.forwards                                   # growing cache against concatenation
    python -m tools.measure.forwards --modes "eager dynamic" "eager dynamic, forward" --contexts 100 400

Whole generations (tools/measure/execution.py) drift with a shared machine by more than a change that saves a
few percent of a forward. Here each model (the demo target and its draft) gets one cache per mode holding the
same context; forwards of one row (a decoding step) and of K + 1 rows (a verification) alternate between the
modes, which mode goes first flipping every time, and each is rolled back after it, as a pass does. Medians
per mode, model, context and row count; the ratio is the first mode's over the second's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: no spinning on a shared CPU

import torch

from app.engine.loading import load_models
from app.engine.runtime.cached_model import CachedModel
from tools.measure.execution import VARIANTS
from tools.options import add_threads

REPO_ROOT = Path(__file__).resolve().parents[2]


def alternated_ms(model, modes: list[str], context: int, rows: tuple[int, ...], forwards: int,
                  seed: int = 0) -> dict[tuple[str, int], float]:
    """Median ms of a forward of each row count in each mode, after `context` random tokens."""
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    caches = {mode: CachedModel(model, execution=VARIANTS[mode]) for mode in modes}
    prefix = torch.randint(0, vocab, (context,), generator=generator)
    for cached in caches.values():
        cached.advance_to(prefix)
    times: dict[tuple[str, int], list[float]] = {(mode, n): [] for mode in modes for n in rows}
    for i in range(forwards):
        fed = torch.randint(0, vocab, (rows[i % len(rows)],), generator=generator)
        for mode in (modes if i % 2 == 0 else modes[::-1]):
            cached = caches[mode]
            started = time.perf_counter()
            cached.extend(fed)
            times[mode, fed.numel()].append(1e3 * (time.perf_counter() - started))
            cached.crop(context)
    return {key: statistics.median(values) for key, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs=2, choices=list(VARIANTS),
                        default=["eager dynamic", "eager dynamic, concatenated"], help="the two modes compared")
    parser.add_argument("--contexts", type=int, nargs="+", default=[100, 400], help="cached tokens (default 100 400)")
    parser.add_argument("--k", type=int, default=4, help="a verification feeds K + 1 rows (default 4)")
    parser.add_argument("--forwards", type=int, default=600, help="forwards per mode, model and context")
    add_threads(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    models = load_models(device="cpu")
    first, second = args.modes
    print(f"| model | context | rows | {first} ms | {second} ms | ratio |\n|---|---|---|---|---|---|")
    for name, model in (("target", models.target), ("draft", models.draft)):
        if model is None:
            continue
        for context in args.contexts:
            ms = alternated_ms(model, args.modes, context, (1, args.k + 1), args.forwards)
            for rows in (1, args.k + 1):
                a, b = ms[first, rows], ms[second, rows]
                print(f"| {name} | {context} | {rows} | {a:.3f} | {b:.3f} | {a / b:.3f} |")
    print(f"load average before {load_before:.2f}, after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
