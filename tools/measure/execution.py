#!/usr/bin/env python3
"""Time the execution modes side by side: eager on the dynamic cache (lean forwards, or the model's forward),
eager on the static cache, compiled.

    python -m tools.measure.execution --json /tmp/execution.json            # the demo family, one CPU thread
    python -m tools.measure.execution --variants "eager dynamic" --variants "eager dynamic, forward" --repeats 9

For each mode (app/engine/runtime/execution.py), on the same weights, interleaved so that a busy machine's drift hits
every mode alike (each repeat runs every mode back to back):

- autoregressive decoding: ms per generated token of a whole greedy generation (`--tokens`, prefill included);
- the draft model at K: ms per generated token the same way;
- one target forward of one token, and one verification forward of K + 1 rows, each followed by the
  rollback a pass makes: ms, timed on the target's own cache at the end of a generation.

Figures are medians over repeats and prompts; the warm-up (one generation of each kind per mode, where a
compiled mode compiles its shapes) is timed apart. The load average is read before and after: on a shared
machine, quote it with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: no spinning on a shared CPU

import torch

from app.bench.methods import load_prompts, timed_generation
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.loading import load_models
from app.engine.runtime.devices import synchronize
from app.engine.runtime.execution import Execution
from app.engine.settings import DecodeSettings
from tools.options import add_threads

REPO_ROOT = Path(__file__).resolve().parents[2]

VARIANTS = {"eager dynamic": Execution("dynamic", False),
            "eager dynamic, forward": Execution("dynamic", False, lean=False),  # the model's forward, not lean
            "eager dynamic, concatenated": Execution("dynamic", False, growing=False),  # DynamicLayer's appends
            "eager dynamic, as transformers": Execution("dynamic", False, lean=False, growing=False),
            "eager static": Execution("static", False), "compiled static": Execution("static", True)}
FORWARDS = 20  # timed forwards of each kind per prompt and repeat


def forward_ms(decoder: SpeculativeDecoder, ids: torch.Tensor, k: int, generator: torch.Generator) -> tuple:
    """(one-token forward, verification forward of k + 1 rows) in ms, each followed by its rollback, on the
    target's cache holding `ids` but its last token (the state between two passes)."""
    target, vocab = decoder.target, decoder.models.vocab_size
    target.advance_to(ids[:-1], last=1)
    device = decoder.models.device
    one, verify = [], []
    for _ in range(FORWARDS):
        drafts = torch.randint(vocab, (k,), generator=generator)
        for samples, fed in ((one, ids), (verify, torch.cat([ids, drafts]))):
            synchronize(device)
            started = time.perf_counter()
            target.advance_to(fed, last=fed.numel() - ids.numel() + 1)
            synchronize(device)
            samples.append(1e3 * (time.perf_counter() - started))
            target.crop(ids.numel() - 1)
    return statistics.median(one), statistics.median(verify)


def measure(models, variants: list[str], prompts, tokens: int, k: int, repeats: int) -> dict:
    decoders = {name: SpeculativeDecoder(replace(models, execution=replace(VARIANTS[name]))) for name in variants}
    kinds = {"autoregressive": (), "draft-model": ("draft-model",)}
    settings = {kind: DecodeSettings(drafters=drafters, k=k, max_new_tokens=tokens) for kind, drafters in kinds.items()}
    warm_up_s = {}
    for name, decoder in decoders.items():  # compiled modes compile here
        started = time.perf_counter()
        for kind in kinds:
            timed_generation(decoder, prompts[0].prompt, settings[kind])
        forward_ms(decoder, torch.tensor(decoder.encode_prompt(prompts[0].prompt)), k, torch.Generator())
        warm_up_s[name] = time.perf_counter() - started
    samples: dict = {name: {"autoregressive_ms_per_token": [], "draft_model_ms_per_token": [],
                            "one_token_forward_ms": [], "verify_forward_ms": []} for name in variants}
    identical = dict.fromkeys(variants, True)
    for repeat in range(repeats):
        for prompt in prompts:
            reference = None
            for name, decoder in decoders.items():  # interleaved
                for kind in kinds:
                    _, seconds, end = timed_generation(decoder, prompt.prompt, settings[kind])
                    samples[name][f"{kind.replace('-', '_')}_ms_per_token"].append(1e3 * seconds / len(end.token_ids))
                    reference = reference or end.token_ids
                    identical[name] &= end.token_ids == reference
                ids = torch.tensor(decoder.encode_prompt(prompt.prompt) + list(end.token_ids))
                one, verify = forward_ms(decoder, ids, k, torch.Generator().manual_seed(repeat))
                samples[name]["one_token_forward_ms"].append(one)
                samples[name]["verify_forward_ms"].append(verify)
    rows = [{"mode": name, **{key: statistics.median(values) for key, values in samples[name].items()},
             "warm_up_s": warm_up_s[name], "identical": identical[name],
             "compile_failure": decoders[name].models.execution.compile_failure} for name in variants]
    return {"rows": rows, "samples": samples}


def table(result: dict, k: int) -> str:
    lines = [f"| mode | autoregressive ms/token | draft model (K = {k}) ms/token | one-token forward ms | "
             f"verify forward ({k + 1} rows) ms | warm-up s | identical |", "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        lines.append(f"| {row['mode']} | {row['autoregressive_ms_per_token']:.2f} | "
                     f"{row['draft_model_ms_per_token']:.2f} | {row['one_token_forward_ms']:.2f} | "
                     f"{row['verify_forward_ms']:.2f} | {row['warm_up_s']:.0f} | {row['identical']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="target folder or hub id (default: the bundled demo family)")
    parser.add_argument("--draft", help="draft model (default: the demo family's)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or mps (default cpu)")
    parser.add_argument("--dtype", default="auto", help="default auto: float32 on the CPU")
    parser.add_argument("--variants", action="append", choices=list(VARIANTS), help="modes (default: all)")
    parser.add_argument("--prompts", type=int, default=3, help="prompts of the bench set (default 3)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per generation (default 64)")
    parser.add_argument("--k", type=int, default=4, help="drafts per pass (default 4)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default 5)")
    add_threads(parser)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    models = load_models(args.target, args.draft, device=args.device, dtype=args.dtype)
    variants = args.variants or list(VARIANTS)
    prompts = load_prompts()[: args.prompts]
    started = time.perf_counter()
    result = measure(models, variants, prompts, args.tokens, args.k, args.repeats)
    result["meta"] = {"target": models.target_name, "device": str(models.device), "dtype": str(models.dtype),
                      "threads": torch.get_num_threads(), "k": args.k, "tokens": args.tokens,
                      "repeats": args.repeats, "prompts": [p.name for p in prompts],
                      "load_average_before": list(load_before), "load_average_after": list(os.getloadavg()),
                      "seconds": round(time.perf_counter() - started, 1), "torch": torch.__version__,
                      "machine": platform.platform(), "processor": platform.processor()}
    print(table(result, args.k))
    print(f"load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; "
          f"{result['meta']['seconds']} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
