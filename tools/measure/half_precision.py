#!/usr/bin/env python3
"""How often speculative greedy output diverges from plain greedy in half precision, and why.

    python -m tools.measure.half_precision                       # bfloat16, every stand-in architecture, markdown table
    python -m tools.measure.half_precision --dtype float16 --tokens 64 --json out.json

For every stand-in architecture (tests/fixtures: tiny random models of real families, built offline), each
prompt and each drafter, the engine decodes greedily twice on CPU in the chosen dtype: plainly, one token per
forward, and speculatively at K = 4 (K + 1 tokens verified in one forward). Where the two token sequences
first differ, the target's logits after the plain run's context are computed and the divergence classified
by app/engine/core/identity.py: a numerical tie (the two tokens are the target's top two and their logits lie
within rounding of each other: the top-2 gap is reported) or a real mismatch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROMPTS = (
    "def add(a, b):\n    return a + b\n\ndef add(",
    "The quick brown fox jumps over the lazy dog. The quick",
    "for i in range(10):\n    print(i * i)\nfor i in",
    "Le décodage spéculatif propose quelques jetons et",
)
DRAFTERS = ("draft-model", "prompt-lookup", "layer-skip")


def measure(dtype: str, tokens: int, k: int, archs: list[str], device: str = "cpu",
            prompts: tuple[str, ...] = PROMPTS) -> dict:
    import torch

    from app.engine.core.identity import classify, logits_at
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models
    from app.engine.settings import DecodeSettings
    from tests.fixtures.architectures import available, build_pair

    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for arch in archs:
            if available(arch):
                continue
            target, draft = build_pair(Path(folder) / arch, arch)
            models = load_models(str(target), str(draft), device=device, dtype=dtype)
            decoder = SpeculativeDecoder(models)
            for drafter in DRAFTERS:
                row = {"arch": arch, "drafter": drafter, "runs": 0, "diverged": 0, "ties": 0, "mismatches": 0,
                       "gaps": [], "mismatch_gaps": [], "tokens": 0}
                for prompt in prompts:
                    prompt_ids = decoder.encode_prompt(prompt)
                    plain = list(decoder.generate(prompt, DecodeSettings(drafters=(), max_new_tokens=tokens)))[-1]
                    spec = list(decoder.generate(prompt, DecodeSettings(drafters=(drafter,), k=k,
                                                                        max_new_tokens=tokens)))[-1]
                    ref, cand = list(plain.token_ids), list(spec.token_ids)
                    row["runs"] += 1
                    row["tokens"] += len(ref)
                    verdict = classify(ref, cand, None, models.dtype)
                    if verdict.index is not None and verdict.index < min(len(ref), len(cand)):
                        logits = logits_at(models.target, prompt_ids + ref[:verdict.index])
                        verdict = classify(ref, cand, logits, models.dtype)
                    if verdict.identical:
                        continue
                    row["diverged"] += 1
                    if verdict.outcome == "tie":
                        row["ties"] += 1
                        row["gaps"].append(abs(verdict.gap))
                    else:
                        row["mismatches"] += 1
                        row["mismatch_gaps"].append(verdict.gap)
                    print(f"{arch} {drafter}: {verdict}", file=sys.stderr)
                rows.append(row)
    return {"dtype": dtype, "device": device, "tokens": tokens, "k": k, "prompts": len(prompts), "rows": rows}


def markdown(result: dict) -> str:
    lines = [f"dtype {result['dtype']}, K = {result['k']}, {result['tokens']} new tokens, {result['prompts']} prompts "
             "per cell", "",
             "| architecture | drafter | runs | diverged | numerical ties | real mismatches | top-2 gap at ties |",
             "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        gaps = row["gaps"]
        gap = "-" if not gaps else (f"{gaps[0]:.3g}" if len(gaps) == 1 else
                                    f"median {statistics.median(gaps):.3g}, max {max(gaps):.3g}")
        lines.append(f"| {row['arch']} | {row['drafter']} | {row['runs']} | {row['diverged']} | {row['ties']} | "
                     f"{row['mismatches']} | {gap} |")
    runs = sum(r["runs"] for r in result["rows"])
    diverged = sum(r["diverged"] for r in result["rows"])
    ties = sum(r["ties"] for r in result["rows"])
    lines.append(f"| **all** | | {runs} | {diverged} ({diverged / runs:.0%}) | {ties} | {diverged - ties} | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from tests.fixtures.architectures import ARCHITECTURES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per run")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--arch", action="append", help="only these architectures (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = measure(args.dtype, args.tokens, args.k, args.arch or list(ARCHITECTURES))
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(markdown(result))
    print(f"\n{result['seconds']} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
