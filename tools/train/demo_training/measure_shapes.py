"""Short CPU measurements that size the demo family (see ``docs/notes/V2_PLAN.md``).

    PYTHONPATH=tools python -m demo_training.measure_shapes [--train-seconds 40]

For each candidate shape: training tokens/s (target loss with early exits for
targets, distillation-like forward+backward for drafts; ``--train-threads``
torch threads) and inference milliseconds per forward with a KV cache of
``--context`` tokens, one token and a 5-token verify (one torch thread). The
load average is printed with every figure because the machine may be shared:
the fastest step / forward approximates a quiet machine, the mean / median
what a run sharing it gets.
Random token ids are enough: the cost does not depend on the text.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
from transformers import DynamicCache

from .config import ModelShape, StageSchedule, quick_config
from .loop import make_optimizer
from .models import build_model, llama_config, parameter_count
from .objectives import make_target_loss

CANDIDATES = {
    "target-128x6 (v1)": ModelShape(128, 6, 4, 384),
    "target-192x8": ModelShape(192, 8, 6, 512),
    "target-256x6": ModelShape(256, 6, 4, 704),
    "target-256x8": ModelShape(256, 8, 4, 704),
    "target-320x8": ModelShape(320, 8, 5, 864),
    "draft-128x1": ModelShape(128, 1, 4, 384),
    "draft-256x1": ModelShape(256, 1, 4, 704),
    "draft-192x1": ModelShape(192, 1, 6, 512),
    "draft-192x2": ModelShape(192, 2, 6, 512),
    "draft-96x2 (v1)": ModelShape(96, 2, 3, 256),
}


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def training_step_seconds(shape: ModelShape, vocab: int, block: int, batch: int,
                          seconds: float, early_exits: bool, exit_stride: int = 4) -> list[float]:
    """Wall time of each optimiser step for ``seconds`` (after one warm-up step)."""
    model = build_model(llama_config(shape, vocab, block, 0), seed=0)
    config = dataclasses.replace(quick_config(), target=shape, early_exit_position_stride=exit_stride)
    loss_fn = make_target_loss(config) if early_exits else (
        lambda m, b, s: (m(input_ids=b, labels=b).loss, 0.0))
    optimizer = make_optimizer(model, StageSchedule(steps=1, batch_size=batch, peak_lr=1e-4, warmup_steps=1))
    data = torch.randint(1, vocab, (batch, block))
    durations: list[float] = []
    while sum(durations[1:]) < seconds:
        started = time.perf_counter()
        loss, _ = loss_fn(model, data, len(durations))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        durations.append(time.perf_counter() - started)
    return durations[1:]


@torch.no_grad()
def forward_milliseconds(shape: ModelShape, vocab: int, context: int, new_tokens: int, repeats: int) -> dict:
    """Minimum and median ms of one cached forward of ``new_tokens`` after ``context`` tokens."""
    model = build_model(llama_config(shape, vocab, 1024, 0), seed=0).eval()
    cache = DynamicCache()
    model(input_ids=torch.randint(1, vocab, (1, context)), past_key_values=cache, use_cache=True)
    step = torch.randint(1, vocab, (1, new_tokens))
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        model(input_ids=step, past_key_values=cache, use_cache=True)
        timings.append(1000 * (time.perf_counter() - started))
        cache.crop(-new_tokens)
    return {"min": round(min(timings[2:]), 2), "median": round(statistics.median(timings[2:]), 2)}


def measure(name: str, shape: ModelShape, args: argparse.Namespace) -> dict:
    model = build_model(llama_config(shape, args.vocab, args.block, 0), seed=0)
    row = {"name": name, "shape": shape.__dict__, "vocab": args.vocab,
           "parameters": parameter_count(model),
           "non_embedding_parameters": parameter_count(model) - args.vocab * shape.hidden_size}
    torch.set_num_threads(args.train_threads)
    row["load_before_train"] = load_average()
    steps = training_step_seconds(shape, args.vocab, args.block, args.batch, args.train_seconds,
                                  name.startswith("target"), args.exit_stride)
    row["exit_stride"] = args.exit_stride
    tokens = args.batch * args.block
    # The fastest step approximates a quiet machine; the mean is what a
    # background run sharing the machine got.
    row["train_tokens_per_s"] = {"best": round(tokens / min(steps)), "mean": round(tokens * len(steps) / sum(steps))}
    torch.set_num_threads(1)
    row["load_before_infer"] = load_average()
    row["ms_forward_1"] = forward_milliseconds(shape, args.vocab, args.context, 1, args.repeats)
    row["ms_forward_5"] = forward_milliseconds(shape, args.vocab, args.context, 5, args.repeats)
    return row


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="candidate names (substring match)")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--block", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--train-seconds", type=float, default=40.0)
    parser.add_argument("--train-threads", type=int, default=2)
    parser.add_argument("--exit-stride", type=int, default=4, help="early-exit loss on every n-th position")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=40)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name, shape in CANDIDATES.items():
        if args.only and not any(part in name for part in args.only):
            continue
        print(json.dumps(measure(name, shape, args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
