#!/usr/bin/env python3
"""Measure demo families side by side on the held-out prompts: loops, parse rate, acceptance, speed-up.

    python -m tools.measure.goals                                   # the bundled family
    python -m tools.measure.goals --family v1=assets/models/demo --family v2=DIR --json OUT

Every family folder holds ``target/``, ``draft/`` and optionally ``heads/``.
One process, one torch thread by default, float32 on the CPU, greedy decoding
with the real engine at K = 4 on the prompts of
``tools/train/demo_training/heldout_prompts.json`` (written for the project, never
tuned on), each run interleaved with autoregressive decoding of the same
prompt (repeat -> prompt -> family -> drafter), so a change of machine load
hits all rows alike.

Per family:

- Greedy continuations of ``--max-new-tokens`` tokens (the autoregressive run;
  every drafter's output is checked to equal it token for token). **Loop
  metric**: the largest share of the last 64 generated tokens covered by the
  occurrences of one n-gram (4 <= n <= 32) that occurs at least twice there;
  a continuation is degenerate when that share is >= 0.5. A code continuation
  **parses** when every line of prompt + continuation parses except possibly
  the last, cut-off one (one open block allowed, see
  ``demo_training.evaluation.valid_python_lines``).
- Per drafter: per-token acceptance of the tested positions alpha = accepted /
  (accepted + passes that ended in a rejection) (the drafts after a pass's
  first rejection are never tested), the acceptance rate accepted / drafted
  (drafts clipped by the token limit left out; app/engine/core/stats.py), tokens per pass,
  tokens/s and the speed-up = autoregressive time / drafter time (sums of
  per-prompt medians over the repeats), over all prompts and over the prompts
  whose continuation is not degenerate (the figures that count: loops make any
  drafter look good).

``--repetition-penalty`` and ``--no-repeat-ngram-size`` apply the engine's
repetition controls (Hugging Face's semantics) to the target and every drafter
alike; greedy identity with autoregressive decoding still holds. Left out, each
family runs with what its ``playground.json`` suggests (as the window starts),
else with the controls off.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: no spinning on a shared CPU

import torch

from app.engine.core.stats import Acceptance
from app.engine.settings import RepetitionSettings
from tools.options import add_threads
from tools.train.demo_training.evaluation import folder_megabytes, valid_python_lines
from tools.train.demo_training.model_card import upsert_section

REPO_ROOT = Path(__file__).resolve().parents[2]

PROMPTS = REPO_ROOT / "tools" / "train" / "demo_training" / "heldout_prompts.json"
DEFAULT_FAMILY = REPO_ROOT / "assets" / "models" / "demo"
DRAFTERS = ("draft-model", "medusa", "mtp", "eagle", "dflash")
K = 4
LOOP_WINDOW = 64
LOOP_MIN_N, LOOP_MAX_N = 4, 32
LOOP_THRESHOLD = 0.5
GOALS_HEADING = "## Goals on held-out prompts"
LEARNED_HEADS = ("medusa", "mtp", "eagle", "dflash")
# The family's goals (issue-level targets, measured on the loop-free prompts): (what, figure, bar).
ALPHA_GOALS = (("draft-model", 0.75), ("eagle", 0.85))
SPEEDUP_GOALS = (("draft model", ("draft-model",), 1.3), ("best learned head", LEARNED_HEADS, 1.6))
MIN_LOOP_FREE, MIN_CODE_PARSES, MAX_FOLDER_MB = 0.8, 2 / 3, 60.0


# ---- text quality -------------------------------------------------------------------------------


def loop_share(tokens: list[int], window: int = LOOP_WINDOW) -> float:
    """Largest share of the last `window` tokens covered by the occurrences of one repeated n-gram."""
    tail = tokens[-window:]
    best = 0
    for n in range(LOOP_MIN_N, min(LOOP_MAX_N, len(tail) - 1) + 1):
        starts: dict[tuple[int, ...], list[int]] = {}
        for i in range(len(tail) - n + 1):
            starts.setdefault(tuple(tail[i:i + n]), []).append(i)
        for positions in starts.values():
            if len(positions) >= 2:
                covered: set[int] = set()
                for i in positions:
                    covered.update(range(i, i + n))
                best = max(best, len(covered))
    return best / max(1, len(tail))


def parses(prompt: str, continuation: str) -> bool:
    """Every line of prompt + continuation parses but possibly the last (cut off by the token limit)."""
    text = prompt + continuation
    lines = text.split("\n")
    return valid_python_lines(text) >= len(lines) - 1


# ---- decoding -----------------------------------------------------------------------------------


def decode_once(decoder, prompt: str, drafter: str | None, max_new: int, repetition=None) -> dict:
    from app.engine.events import EndEvent, PassEvent
    from app.engine.settings import DecodeSettings, RepetitionSettings

    settings = DecodeSettings(drafters=(drafter,) if drafter else (), k=K, max_new_tokens=max_new,
                              repetition=repetition or RepetitionSettings())
    passes, acceptance = 0, Acceptance()
    end = None
    started = time.perf_counter()
    for event in decoder.generate(prompt, settings):
        if isinstance(event, PassEvent):
            passes += 1
            acceptance.add(event.drafted)
        end = event
    seconds = time.perf_counter() - started
    if not isinstance(end, EndEvent) or end.reason == "error":
        raise RuntimeError(f"{drafter or 'autoregressive'} failed on {prompt[:40]!r}: {end}")
    return {"seconds": seconds, "tokens": list(end.token_ids), "text": end.text, "passes": passes,
            "acceptance": acceptance}


def load_family(folder: Path):
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models

    heads = folder / "heads"
    models = load_models(str(folder / "target"), str(folder / "draft"), device="cpu", dtype="float32",
                         heads=str(heads) if heads.is_dir() else None)
    return models, SpeculativeDecoder(models)


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def summarise(runs: dict, prompts: list[dict], keep: list[str]) -> dict:
    """Figures of every method over the prompt ids in `keep` (first repeat for counts, medians for time)."""
    if not keep:
        return {}
    ar = sum(statistics.median(r["seconds"] for r in runs["autoregressive"][p]) for p in keep)
    out = {}
    for method, by_prompt in runs.items():
        first = [by_prompt[p][0] for p in keep]
        seconds = sum(statistics.median(r["seconds"] for r in by_prompt[p]) for p in keep)
        tokens = sum(len(r["tokens"]) for r in first)
        row = {"seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
               "speedup": round(ar / seconds, 3)}
        if method != "autoregressive":
            acceptance = sum((r["acceptance"] for r in first), Acceptance())
            row.update({"alpha_tested": rounded(acceptance.alpha),
                        "acceptance_rate": rounded(acceptance.acceptance_rate),
                        "accepted": acceptance.accepted, "drafted": acceptance.judged,
                        "tokens_per_pass": round(tokens / max(1, sum(r["passes"] for r in first)), 3)})
        out[method] = row
    return out


def family_repetition(folder: Path, args):
    """The repetition options as given, else what the family's playground.json suggests (else off)."""
    from app.cli import repetition_from_args
    from app.engine.loading.load import folder_repetition

    return repetition_from_args(args, folder_repetition(folder))


def measure(families: dict[str, Path], prompts: list[dict], repeats: int, max_new: int,
            drafters: tuple[str, ...], repetitions: dict | None = None) -> dict:
    """Every family's figures; `repetitions` (family -> RepetitionSettings, default off) for each family's runs."""
    repetitions = repetitions or {}
    loaded = {name: load_family(folder) for name, folder in families.items()}
    methods = {name: ["autoregressive"] + [d for d in drafters if d in models.available_drafters]
               for name, (models, _) in loaded.items()}
    runs: dict[str, dict[str, dict[str, list[dict]]]] = {
        name: {m: {p["id"]: [] for p in prompts} for m in methods[name]} for name in families}
    for name, (_, decoder) in loaded.items():  # warm-up: allocators, caches, lazy imports
        for method in methods[name]:
            decode_once(decoder, prompts[0]["text"], None if method == "autoregressive" else method, 8)
    started = time.monotonic()
    for repeat in range(repeats):
        for prompt in prompts:
            for name, (_, decoder) in loaded.items():
                for method in methods[name]:
                    run = decode_once(decoder, prompt["text"], None if method == "autoregressive" else method,
                                      max_new, repetitions.get(name))
                    reference = runs[name]["autoregressive"][prompt["id"]]
                    if method != "autoregressive" and run["tokens"] != reference[0]["tokens"]:
                        raise AssertionError(f"{name} {method} differs from greedy decoding on {prompt['id']}")
                    runs[name][method][prompt["id"]].append(run)
        print(f"[goals] repeat {repeat + 1}/{repeats} done after {time.monotonic() - started:.0f}s",
              file=sys.stderr, flush=True)
    report = {}
    for name in families:
        continuations = {}
        for prompt in prompts:
            run = runs[name]["autoregressive"][prompt["id"]][0]
            share = loop_share(run["tokens"])
            entry = {"domain": prompt["domain"], "tokens": len(run["tokens"]), "loop_share": round(share, 3),
                     "degenerate": share >= LOOP_THRESHOLD, "text": run["text"]}
            if prompt["domain"] == "code":
                entry["parses"] = parses(prompt["text"], run["text"])
            continuations[prompt["id"]] = entry
        clean = [p["id"] for p in prompts if not continuations[p["id"]]["degenerate"]]
        code = [c for c in continuations.values() if c["domain"] == "code"]
        report[name] = {
            "folder": str(families[name]),
            "prompts_free_of_loops": f"{len(clean)}/{len(prompts)}",
            "code_parses": f"{sum(c['parses'] for c in code)}/{len(code)}",
            "all_prompts": summarise(runs[name], prompts, [p["id"] for p in prompts]),
            "prompts_free_of_loops_only": summarise(runs[name], prompts, clean),
            "continuations": continuations,
        }
    return report


# ---- model card ---------------------------------------------------------------------------------


def _fraction(text: str) -> float:
    done, total = (int(x) for x in text.split("/"))
    return done / total if total else 0.0


def _mark(met: bool) -> str:
    return "met" if met else "**not met**"


def goal_rows(family: dict) -> list[tuple[str, str, bool]]:
    """(goal, measured, met) for one family's report."""
    clean = family["prompts_free_of_loops_only"]
    rows = [(f"prompts free of loops >= {MIN_LOOP_FREE:.0%}", family["prompts_free_of_loops"],
             _fraction(family["prompts_free_of_loops"]) >= MIN_LOOP_FREE),
            ("code continuations that parse >= 2 of 3", family["code_parses"],
             _fraction(family["code_parses"]) >= MIN_CODE_PARSES - 1e-9)]
    for drafter, bar in ALPHA_GOALS:
        row = clean.get(drafter, {})
        alpha = row.get("alpha_tested")
        rows.append((f"`{drafter}` alpha >= {bar}", "–" if alpha is None else
                     f"{alpha:.3f} (acceptance rate {row['acceptance_rate']:.3f})", alpha is not None and alpha >= bar))
    for label, drafters, bar in SPEEDUP_GOALS:
        measured = [(clean[d]["speedup"], d) for d in drafters if d in clean]
        best = max(measured, default=None)
        rows.append((f"{label} >= {bar}x autoregressive", "–" if best is None else f"{best[0]:.2f}x (`{best[1]}`)",
                     best is not None and best[0] >= bar))
    size = folder_megabytes(Path(family["folder"]))
    rows.append((f"family folder <= {MAX_FOLDER_MB:.0f} MB", f"{size:.1f} MB", size <= MAX_FOLDER_MB))
    return rows


def render_goals_section(report: dict, command: str) -> str:
    """The card's goals section: each family's goals, then the per-drafter figures on loop-free prompts."""
    settings = report["settings"]
    lines = [GOALS_HEADING, "",
             f"Measured with `{command}` on {settings['prompts']} held-out prompts "
             "(`tools/train/demo_training/heldout_prompts.json`, written for the project, never tuned on): greedy, "
             f"K = {settings['k']}, {settings['max_new_tokens']} new tokens, {settings['threads']} torch thread, "
             f"{settings['dtype']}, {settings['repeats']} interleaved repeats (medians); load average "
             f"{report['load_average_before'][0]} before and {report['load_average_after'][0]} after. Loop metric: "
             f"{settings['loop_metric']}. Acceptance and speed-ups count the prompts free of loops only. Every "
             "drafter's output equalled autoregressive decoding token for token.", ""]
    for name, family in report["families"].items():
        controls = RepetitionSettings(**settings.get("repetition", {}).get(name, {})).describe() or \
            "no repetition control"
        lines += [f"**{name}** (`{family['folder']}`; {controls})", "", "| goal | measured | |", "|---|---|---|"]
        lines += [f"| {goal} | {measured} | {_mark(met)} |" for goal, measured, met in goal_rows(family)]
        lines += ["", "| method | alpha | acceptance rate | tokens per pass | tokens/s | speed-up |",
                  "|---|---|---|---|---|---|"]
        for method, row in family["prompts_free_of_loops_only"].items():
            alpha, rate = row.get("alpha_tested"), row.get("acceptance_rate")
            lines.append(f"| `{method}` | {'–' if alpha is None else f'{alpha:.3f}'} | "
                         f"{'–' if rate is None else f'{rate:.3f}'} | {row.get('tokens_per_pass', 1.0):.2f} | "
                         f"{row['tokens_per_s']:.1f} | {row['speedup']:.2f}x |")
        lines.append("")
    return "\n".join(lines)


def parse_family(text: str) -> tuple[str, Path]:
    name, sep, folder = text.partition("=")
    if not sep:
        name, folder = Path(text).name, text
    return name, Path(folder).expanduser()


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", action="append", type=parse_family, default=None, metavar="NAME=DIR",
                        help="a family folder (target/, draft/, heads/); repeat to compare (default: the bundled)")
    parser.add_argument("--prompts", type=Path, default=PROMPTS)
    parser.add_argument("--drafters", default=",".join(DRAFTERS), help="comma-separated; those a family lacks are "
                        "left out")
    parser.add_argument("--repetition-penalty", type=float, default=None,
                        help="Hugging Face's repetition_penalty on target and drafters alike (default: what each "
                             "family's playground.json suggests, else 1.0, off)")
    parser.add_argument("--no-repeat-ngram-size", type=int, default=None,
                        help="Hugging Face's no_repeat_ngram_size (default: the family's suggestion, else 0, off)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    add_threads(parser)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--card", type=Path, default=None,
                        help=f"write the goals into this model card's \"{GOALS_HEADING[3:]}\" section")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    families = dict(args.family or [("demo", DEFAULT_FAMILY)])
    prompts = json.loads(args.prompts.read_text())["prompts"]
    drafters = tuple(d.strip() for d in args.drafters.split(",") if d.strip())
    repetitions = {name: family_repetition(folder, args) for name, folder in families.items()}
    load = os.getloadavg()
    report: dict = {"settings": {"k": K, "greedy": True, "threads": torch.get_num_threads(), "dtype": "float32",
                           "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
                           "repetition": {name: dataclasses.asdict(r) for name, r in repetitions.items()},
                           "prompts": len(prompts), "loop_metric": f"share of the last {LOOP_WINDOW} tokens "
                           f"covered by one repeated n-gram ({LOOP_MIN_N} <= n <= {LOOP_MAX_N}); degenerate "
                           f"at >= {LOOP_THRESHOLD}"},
              "load_average_before": [round(x, 2) for x in load]}
    started = time.monotonic()
    report["families"] = measure(families, prompts, args.repeats, args.max_new_tokens, drafters, repetitions)
    report["seconds"] = round(time.monotonic() - started, 1)
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n")
    if args.card is not None:
        upsert_section(args.card, render_goals_section(report, "python -m tools.measure.goals " + " ".join(
            sys.argv[1:] if argv is None else argv)))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
