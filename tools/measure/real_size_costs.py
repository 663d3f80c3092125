#!/usr/bin/env python3
"""Engine time outside the forwards, and event memory, at the shapes of real checkpoints on CPU.

    python -m tools.measure.real_size_costs                           # SmolLM2-135M and Qwen2.5-0.5B shapes, markdown
    python -m tools.measure.real_size_costs --shape qwen2.5-0.5b --tokens 32 --prompts 3 --json out.json
    python -m tools.measure.real_size_costs --profile                     # and cProfile one generation per shape

The stand-ins (tests/fixtures/real_shapes.py) have the real configs and random weights, float32, one
thread. Every pass's PassClock splits its time into the draft, the verify forward and the rest; the rest,
plus the draft where no model drafts (prompt lookup searches the context: engine work, not a forward), is
the engine's own time outside the forwards. The tool wraps the decoder's per-pass steps in timers to
split that further: softmax of the target's logits (K'+1, V), the verification rule, detokenisation, the
drafted and appended tokens, the inspector detail (the device-side gathers of what the event shows, top-k of
p and q over V among them, and the detail built from them) and the remainder (clip, crop,
statistics, the event). Event memory per token is the pickled size of the pass events and their
tracemalloc size, over committed tokens. Goal: outside the forwards <= 5 % of the pass.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pickle
import pstats
import statistics
import sys
import time
import tracemalloc
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from tools.measure.half_precision import PROMPTS
from tools.options import add_threads

ROOT = Path(__file__).resolve().parents[2]

METHODS = {"plain": (), "prompt-lookup": ("prompt-lookup",)}
STEPS = ("softmax", "verify_rule", "detok", "tokens", "inspector")
GOAL = 0.05


@contextmanager
def step_timers():
    """Wrap the decoder's per-pass steps; yields a dict step -> ms, summed until reset."""
    from app.engine.core.sampling import TokenSampler
    from app.engine.decoding import decoder as dec

    spent: dict[str, float] = defaultdict(float)

    def timed(step, fn):
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[step] += 1e3 * (time.perf_counter() - started)
        return wrapper

    patches = [(dec, "token_texts", "detok"), (dec, "drafted_tokens", "tokens"), (dec, "appended_token", "tokens"),
               (dec, "pass_detail", "inspector"), (dec, "block_reads", "inspector"), (TokenSampler, "probs", "softmax"),
               (dec.SpeculativeDecoder, "_verify", "verify_rule")]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, step in patches:
        setattr(owner, name, timed(step, getattr(owner, name)))
    try:
        yield spent
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


def run_once(decoder, prompt: str, drafters: tuple[str, ...], k: int, tokens: int):
    from app.engine.events import EndEvent, PassEvent
    from app.engine.settings import DecodeSettings

    started = time.perf_counter()
    events = list(decoder.generate(prompt, DecodeSettings(drafters=drafters, k=k, max_new_tokens=tokens)))
    wall_ms = 1e3 * (time.perf_counter() - started)
    end = events[-1]
    assert isinstance(end, EndEvent) and end.reason != "error", getattr(end, "error", end)
    return [e for e in events if isinstance(e, PassEvent)], end, wall_ms


def event_memory(decoder, prompt: str, drafters: tuple[str, ...], k: int, tokens: int) -> dict:
    """Bytes per committed token of the pass events: pickled, and as Python objects (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    passes, end, _ = run_once(decoder, prompt, drafters, k, tokens)
    held = tracemalloc.get_traced_memory()[0]
    committed = sum(len(p.committed_ids) for p in passes)
    pickled = sum(len(pickle.dumps(p)) for p in passes)
    del passes, end
    gc.collect()
    freed = held - tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return {"pickle_bytes_per_token": pickled / committed, "tracemalloc_bytes_per_token": freed / committed}


def measure_shape(key: str, prompts: list[str], tokens: int, k: int, tiny: bool, profile: bool) -> dict:
    from app.engine.decoding.decoder import SpeculativeDecoder
    from tests.fixtures.real_shapes import SHAPES, stand_in, weight_bytes

    started = time.perf_counter()
    models = stand_in(key, is_tiny=tiny)
    decoder = SpeculativeDecoder(models)
    shape = {"shape": SHAPES[key].name, "vocab": models.vocab_size, "layers": models.num_layers,
             "weight_mb": weight_bytes(models.target) / 2**20, "build_s": time.perf_counter() - started, "rows": []}
    run_once(decoder, prompts[0], ("prompt-lookup",), k, 4)  # warm-up
    for method, drafters in METHODS.items():
        totals: dict[str, float] = defaultdict(float)
        per_pass_outside: list[float] = []
        with step_timers() as spent:
            for prompt in prompts:
                passes, end, wall_ms = run_once(decoder, prompt, drafters, k, tokens)
                for p in passes:
                    t = p.timing
                    forwards = t.verify_ms + (t.draft_ms if p.drafter == "draft-model" else 0.0)
                    totals["total"] += t.total_ms
                    totals["draft"] += t.draft_ms
                    totals["verify"] += t.verify_ms
                    totals["outside"] += t.total_ms - forwards
                    per_pass_outside.append(t.total_ms - forwards)
                totals["passes"] += len(passes)
                totals["tokens"] += len(end.token_ids)
                totals["wall"] += wall_ms
            steps = dict(spent)
        row = {"method": method, "passes": int(totals["passes"]), "tokens": int(totals["tokens"]),
               "tokens_per_pass": totals["tokens"] / totals["passes"],
               "pass_ms": totals["total"] / totals["passes"], "verify_ms": totals["verify"] / totals["passes"],
               "draft_ms": totals["draft"] / totals["passes"], "outside_ms": totals["outside"] / totals["passes"],
               "outside_share": totals["outside"] / totals["total"],
               "outside_ms_median": statistics.median(per_pass_outside),
               "steps_ms_per_pass": {s: steps.get(s, 0.0) / totals["passes"] for s in STEPS},
               # generation wall time outside every pass clock: prefill, the timed t_T forwards, the loop itself
               "unclocked_ms": (totals["wall"] - totals["total"]) / len(prompts)}
        # the draft time of a drafter that runs no model (prompt lookup's search) is engine time too
        row["lookup_ms"] = row["draft_ms"]
        row["rest_ms"] = row["outside_ms"] - sum(row["steps_ms_per_pass"].values()) - row["lookup_ms"]
        row.update(event_memory(decoder, prompts[0], drafters, k, tokens))
        shape["rows"].append(row)
        print(f"{shape['shape']} {method}: outside {row['outside_share']:.1%} of {row['pass_ms']:.1f} ms/pass",
              file=sys.stderr)
    if profile:
        shape["profile"] = profile_generation(decoder, prompts[0], k, tokens)
    return shape


def profile_generation(decoder, prompt: str, k: int, tokens: int, top: int = 20) -> str:
    """cProfile of one prompt-lookup generation: the engine's functions by cumulative time (forwards included)."""
    profiler = cProfile.Profile()
    profiler.enable()
    run_once(decoder, prompt, ("prompt-lookup",), k, tokens)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats("app/engine", top)
    return out.getvalue()


def markdown(result: dict) -> str:
    lines = [f"float32, {result['threads']} thread, K = {result['k']}, {result['tokens']} new tokens, "
             f"{result['prompts']} prompts per row; load average {result['load_average']}", "",
             "| shape | vocabulary | method | tokens / pass | ms / pass | verify forward | outside the forwards | "
             "share | softmax | rule | lookup | detok | tokens | inspector | rest | event bytes / token "
             "(pickle, memory) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for shape in result["shapes"]:
        for row in shape["rows"]:
            s = row["steps_ms_per_pass"]
            lines.append(
                f"| {shape['shape']} | {shape['vocab']:,} | {row['method']} | {row['tokens_per_pass']:.2f} | "
                f"{row['pass_ms']:.1f} | {row['verify_ms']:.1f} | {row['outside_ms']:.2f} ms | "
                f"{row['outside_share']:.1%} | {s['softmax']:.2f} | {s['verify_rule']:.2f} | {row['lookup_ms']:.2f} | "
                f"{s['detok']:.2f} | {s['tokens']:.2f} | {s['inspector']:.2f} | {row['rest_ms']:.2f} | "
                f"{row['pickle_bytes_per_token']:.0f}, {row['tracemalloc_bytes_per_token']:.0f} |")
    return "\n".join(lines)


def bench_at_shape(key: str, k: int, tiny: bool) -> str:
    """The quick bench (its prompts, methods and token limit) on a stand-in of this shape and its drafter."""
    from app.bench import methods as bench
    from tests.fixtures.real_shapes import SHAPES, stand_in

    models = stand_in(key, with_draft=True, is_tiny=tiny)
    prompts = bench.quick_prompts(bench.load_prompts())
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results = bench.benchmark(models, prompts, k=k, repeats=1, only=set(bench.QUICK_METHODS))
    return (f"\n{SHAPES[key].name} stand-in (random weights; vocabulary {SHAPES[key].vocab:,}), K = {k}, "
            f"load average {load}\n\n{bench.markdown_table(results)}")


def main(argv: list[str] | None = None) -> int:
    import torch

    from tests.fixtures.real_shapes import SHAPES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", choices=list(SHAPES),
                        help="only these shapes (repeatable; default: smollm2-135m and qwen2.5-0.5b)")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per generation (default 32)")
    parser.add_argument("--prompts", type=int, default=3, help=f"prompts per row, 1..{len(PROMPTS)} (default 3)")
    parser.add_argument("--k", type=int, default=4, help="draft length K (default 4)")
    add_threads(parser)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes with the same layout (a smoke test)")
    parser.add_argument("--profile", action="store_true", help="also cProfile one generation per shape")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--bench", action="store_true",
                        help="instead: the quick bench at each shape, with a small drafter of its vocabulary")
    args = parser.parse_args(argv)
    if args.bench:
        torch.set_num_threads(args.threads)
        for key in args.shape or ["smollm2-135m", "qwen2.5-0.5b"]:
            print(bench_at_shape(key, args.k, args.tiny), flush=True)
        return 0
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    prompts = list(PROMPTS[: max(1, min(args.prompts, len(PROMPTS)))])
    result = {"k": args.k, "tokens": args.tokens, "prompts": len(prompts), "threads": args.threads,
              "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()), "cpus": os.cpu_count(),
              "torch": torch.__version__,
              "shapes": [measure_shape(key, prompts, args.tokens, args.k, args.tiny, args.profile)
                         for key in args.shape or ["smollm2-135m", "qwen2.5-0.5b"]]}
    result["load_average_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(markdown(result))
    for shape in result["shapes"]:
        if "profile" in shape:
            print(f"\n{shape['shape']}: cProfile of one prompt-lookup generation\n{shape['profile']}")
    print(f"\n{result['seconds']} s; load average before {result['load_average']}, after "
          f"{result['load_average_after']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
