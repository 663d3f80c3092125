#!/usr/bin/env python3
"""A compiling load cold and warm, and ms per token compiled against eager, for the drafters that run models.

    python -m tools.measure.compiled                          # the bundled family on the CPU
    python -m tools.measure.compiled --target T --draft D --heads H --tokens 64 --drafters eagle

Each load runs in a fresh process (dynamo forgets everything at exit; what persists is the compile cache in
the user cache folder, app/engine/runtime/compile_cache.py): first with an empty cache folder (cold), then with the
one the first load filled (warm), then eagerly on the dynamic cache. Each process times one warm-up
generation per method apart, then `--repeats` greedy generations of `--tokens` tokens per method, and reports
ms per token (median) and whether anything compiled after the load (dynamo's frame count). Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "def fibonacci(n):\n    "


def child(args: argparse.Namespace) -> dict:
    """One load and its generations, in this process."""
    import torch
    from torch._dynamo.utils import counters

    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models
    from app.engine.settings import DecodeSettings

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    models = load_models(args.target, args.draft, device=args.device, cache=args.cache, compile=args.compile,
                         heads=args.heads)
    load_s = time.perf_counter() - started
    decoder = SpeculativeDecoder(models)
    frames_at_load = counters["stats"]["unique_graphs"]
    rows = {}
    for method in args.drafters:
        settings = DecodeSettings(drafters=() if method == "autoregressive" else (method,), k=args.k,
                                  max_new_tokens=args.tokens)
        list(decoder.generate(PROMPT, settings))  # a warm-up run: allocations, first captures
        times = []
        for _ in range(args.repeats):
            decoder.forget_caches()
            begun = time.perf_counter()
            end = list(decoder.generate(PROMPT, settings))[-1]
            times.append(1e3 * (time.perf_counter() - begun) / max(1, len(end.token_ids)))
        rows[method] = round(statistics.median(times), 2)
    return {"mode": models.execution.label, "load_s": round(load_s, 1), "ms_per_token": rows,
            "graphs_compiled_after_load": counters["stats"]["unique_graphs"] - frames_at_load}


def spawn(args: argparse.Namespace, cache_folder: str, *mode: str) -> dict:
    command = [sys.executable, "-m", "tools.measure.compiled", "--child", "--device", args.device,
               "--tokens", str(args.tokens), "--repeats", str(args.repeats), "--k", str(args.k),
               "--threads", str(args.threads),
               "--drafters", *args.drafters, *mode]
    for option in ("target", "draft", "heads"):
        if getattr(args, option):
            command += [f"--{option}", getattr(args, option)]
    env = dict(os.environ, SPEC_PLAYGROUND_CACHE=cache_folder, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1")
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--heads", help="a folder of learned heads for the target (the bundled family has its own)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--drafters", nargs="+", default=["autoregressive", "draft-model", "eagle"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cache", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--compile", action="store_true", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-compile", dest="compile", action="store_false", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    with tempfile.TemporaryDirectory() as cache_folder:
        report = {"load_average_before": list(os.getloadavg()),
                  "cold": spawn(args, cache_folder, "--cache", "static", "--compile"),
                  "warm": spawn(args, cache_folder, "--cache", "static", "--compile"),
                  "eager": spawn(args, cache_folder, "--cache", "dynamic", "--no-compile"),
                  "load_average_after": list(os.getloadavg())}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
