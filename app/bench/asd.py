"""ASD's speed / fidelity trade-off: a sweep over the budget B, gate g and cap M (docs/ALGORITHMS.md §5.7).

Every drafter runs every point (B, g, M) on every prompt, interleaved with
strict greedy verification of the same drafter and K: per repeat, per prompt,
per drafter the order is

    G, P_1 .. P_E, G, P_{E+1} .. P_{2E}, G, ...      (E = GREEDY_EVERY)

and each point's speed is taken against the mean of the two strict greedy runs
that bracket it, so drift of a shared machine cancels. One thread, one
process, one warm-up per drafter; figures are medians over repeats.

Per point, summed over the prompts (T tokens, P passes, of one repeat):

    relative tokens/s  = (T / seconds) / (T_G / seconds_G)       against the bracketing greedy runs
    tokens per pass    = T / P
    passes saved       = P_G * T / T_G - P      strict greedy's measured passes, scaled to this output's length
    exceptions, regret spent, reused, saved     the end events' `asd` (per request, mean over prompts)

and fidelity against strict greedy's output `y` for the same prompt (app/engine/core/fidelity.py):
the first divergence, the token edit distance, the target's mean log-probability
of the output minus that of `y` (mean over prompts), and for code prompts
whether the prompt and the output's complete top-level statements still
parse where greedy's did. B = 0 is strict greedy whatever g and M (§5.5), so the grid keeps
one B = 0 point, run under the ASD rule: its speed is the cost of the rule itself.

The frontier of a drafter: its points that no other of its points beats on
both relative tokens/s and log-probability delta (>= on both, > on one),
strict greedy (1.0, 0.0) included as a point.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from app.bench.methods import BenchPrompt, timed_generation
from app.engine.core.fidelity import complete_statements, edit_distance, first_divergence, mean_log_prob, parses
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import EndEvent
from app.engine.loading import LoadedModels
from app.engine.settings import AsdSettings, DecodeSettings

BUDGETS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, math.inf)
GATES = (0.1, 0.25, 0.5, 1.0)
CAPS = (1, 2, 4)
QUICK_BUDGETS = (0.0, 8.0, math.inf)
QUICK_GATES = (0.25,)
QUICK_CAPS = (2,)
DEFAULT = AsdSettings()  # B = 8, g = 0.25, M = 2
DRAFTERS = ("draft-model", "eagle", "medusa", "prompt-lookup")
GREEDY_EVERY = 4  # points between two strict greedy runs of the same prompt and drafter
Step = Callable[[int, int, str], None]  # (generations done, generations in all, what just ran)


def grid(budgets: Sequence[float] = BUDGETS, gates: Sequence[float] = GATES,
         caps: Sequence[int] = CAPS) -> list[AsdSettings]:
    """Every (B, g, M), with B = 0 once (at the default g and M): it is strict greedy whatever g and M."""
    points = [AsdSettings(0.0, DEFAULT.gate, DEFAULT.cap)] if 0.0 in budgets else []
    points += [AsdSettings(b, g, m) for b in budgets if b > 0 for g in gates for m in caps]
    return points


@dataclass
class _Run:
    ids: list[int]
    seconds: float
    passes: int
    end: EndEvent


@dataclass
class StrictResult:
    """Strict greedy verification of one drafter: the reference every point is measured against."""

    drafter: str
    tokens_per_s: float  # median over repeats, summed over prompts
    tokens_per_pass: float
    passes: int  # summed over prompts (repeat 0)
    tokens: int
    mean_log_prob: float | None  # mean over prompts of the target's mean log-probability of greedy's output
    parses: list[bool | None]  # per prompt: code prompts' output up to its last full line parses; None for prose


@dataclass
class PointResult:
    drafter: str
    budget: float  # B (inf = unbounded; written as null in the JSON, with `budget_text` "inf")
    budget_text: str
    gate: float
    cap: int
    is_default: bool  # B = 8, g = 0.25, M = 2
    relative_tokens_per_s: float  # median over repeats of (tokens/s) / (bracketing strict greedy tokens/s)
    repeats_relative: list[float]
    tokens_per_s: float
    tokens_per_pass: float
    passes: int  # summed over prompts (repeat 0)
    passes_saved: float  # measured: strict greedy's passes scaled to this output's length, minus this point's
    passes_saved_estimate: float  # the engine's estimate on the same logits, summed over prompts (§5.6)
    exceptions: float  # per request, mean over prompts
    regret_spent: float  # per request, mean over prompts
    reused: float  # per request, mean over prompts
    saved: float  # tokens, per request, mean over prompts
    first_divergence: list[int | None]  # per prompt; None = identical to strict greedy
    diverged: int  # prompts whose output differs from strict greedy
    edit_distance: float  # mean over prompts
    mean_log_prob: float | None  # mean over prompts
    log_prob_delta: float | None  # mean over prompts of (this output's mean log p) - (greedy's)
    parses: list[bool | None]  # per prompt (None for prose)
    parses_kept: bool | None  # every code prompt whose greedy output parsed still parses; None: no such prompt
    frontier: bool = False


@dataclass
class SweepResult:
    strict: list[StrictResult]
    points: list[PointResult]
    meta: dict = field(default_factory=dict)


def count_steps(drafters: int, points: int, prompts: int, repeats: int) -> int:
    """Generations of one sweep: a warm-up per drafter, then points and bracketing greedy runs."""
    greedy = math.ceil(points / GREEDY_EVERY) + 1
    return drafters * (1 + prompts * repeats * (points + greedy))


def _generate(decoder: SpeculativeDecoder, prompt: BenchPrompt, drafter: str, k: int,
              asd: AsdSettings | None) -> _Run:
    settings = DecodeSettings(drafters=(drafter,), k=k, max_new_tokens=prompt.max_new_tokens,
                              verify="greedy" if asd is None else "asd", asd=asd or DEFAULT)
    _, seconds, end = timed_generation(decoder, prompt.prompt, settings)
    return _Run(list(end.token_ids), seconds, end.passes, end)


def _code_parses(prompt: BenchPrompt, text: str) -> bool | None:
    return parses(prompt.prompt + complete_statements(text)) if prompt.kind == "code" else None


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.fmean(kept) if kept else None


def sweep(models: LoadedModels, prompts: list[BenchPrompt], points: list[AsdSettings], k: int = 4, repeats: int = 3,
          drafters: Sequence[str] | None = None, progress: Callable[[str], None] = lambda message: None,
          step: Step | None = None) -> SweepResult:
    """Run the sweep (see the module docstring); `drafters` default: those of DRAFTERS the models offer."""
    available = [d for d in (drafters or DRAFTERS) if d in models.available_drafters]
    if not available:
        raise ValueError(f"none of the drafters {list(drafters or DRAFTERS)} is available with these models")
    decoder = SpeculativeDecoder(models)
    total, done = count_steps(len(available), len(points), len(prompts), repeats), 0

    def advance(what: str) -> None:
        nonlocal done
        done += 1
        if step is not None:
            step(done, total, what)

    for drafter in available:
        progress(f"warm-up {drafter}")
        _generate(decoder, prompts[0], drafter, k, DEFAULT)
        advance(drafter)
    # runs[drafter][repeat][prompt] = (greedy runs, point runs)
    runs: dict[str, list[list[tuple[list[_Run], list[_Run]]]]] = {d: [] for d in available}
    for repeat in range(repeats):
        for drafter in available:
            runs[drafter].append([])
        for index, prompt in enumerate(prompts):
            progress(f"repeat {repeat + 1}/{repeats}, prompt {index + 1}/{len(prompts)} ({prompt.name})")
            for drafter in available:
                greedy, measured = [_generate(decoder, prompt, drafter, k, None)], []
                advance(f"{drafter} strict greedy")
                for j, point in enumerate(points):
                    measured.append(_generate(decoder, prompt, drafter, k, point))
                    advance(f"{drafter} B={point.budget} g={point.gate} M={point.cap}")
                    if (j + 1) % GREEDY_EVERY == 0 or j + 1 == len(points):
                        greedy.append(_generate(decoder, prompt, drafter, k, None))
                        advance(f"{drafter} strict greedy")
                runs[drafter][repeat].append((greedy, measured))
    progress("scoring the outputs with the target")
    return _summarise(models, prompts, points, available, runs)


def _summarise(models: LoadedModels, prompts: list[BenchPrompt], points: list[AsdSettings], drafters: list[str],
               runs: dict[str, list[list[tuple[list[_Run], list[_Run]]]]]) -> SweepResult:
    tokenizer = models.tokenizer
    prompt_ids = [tokenizer(p.prompt, add_special_tokens=True)["input_ids"] for p in prompts]
    log_prob_cache: dict[tuple[int, tuple[int, ...]], float | None] = {}

    def log_prob(i: int, ids: list[int]) -> float | None:
        key = (i, tuple(ids))
        if key not in log_prob_cache:
            log_prob_cache[key] = mean_log_prob(models.target, prompt_ids[i], ids)
        return log_prob_cache[key]

    strict_results, point_results = [], []
    for drafter in drafters:
        reps = runs[drafter]
        first = reps[0]  # repeat 0: the outputs (deterministic) and pass counts
        g_ids = [greedy[0].ids for greedy, _ in first]
        g_lp = [log_prob(i, ids) for i, ids in enumerate(g_ids)]
        g_text = [greedy[0].end.text for greedy, _ in first]
        g_parses = [_code_parses(p, t) for p, t in zip(prompts, g_text, strict=True)]
        g_tokens = [len(ids) for ids in g_ids]
        g_passes = [greedy[0].passes for greedy, _ in first]
        g_rates = [sum(len(r.ids) for greedy, _ in rep for r in greedy) / sum(r.seconds for greedy, _ in rep
                                                                               for r in greedy) for rep in reps]
        strict_results.append(StrictResult(
            drafter, statistics.median(g_rates), sum(g_tokens) / max(1, sum(g_passes)), sum(g_passes),
            sum(g_tokens), _mean(g_lp), g_parses))
        for j, point in enumerate(points):
            relative, rates = [], []
            for rep in reps:
                tokens = sum(len(measured[j].ids) for _, measured in rep)
                seconds = sum(measured[j].seconds for _, measured in rep)
                bracket = [greedy[j // GREEDY_EVERY + b] for greedy, _ in rep for b in (0, 1)]
                base = sum(len(r.ids) for r in bracket) / sum(r.seconds for r in bracket)
                rates.append(tokens / seconds)
                relative.append(tokens / seconds / base)
            ours = [measured[j] for _, measured in first]
            summaries = [r.end.asd for r in ours]
            lp = [log_prob(i, r.ids) for i, r in enumerate(ours)]
            deltas = [None if a is None or b is None else a - b for a, b in zip(lp, g_lp, strict=True)]
            divergence = [first_divergence(r.ids, ref) for r, ref in zip(ours, g_ids, strict=True)]
            point_parses = [_code_parses(p, r.end.text) for p, r in zip(prompts, ours, strict=True)]
            kept_parse = [ours_ok for ours_ok, greedy_ok in zip(point_parses, g_parses, strict=True) if greedy_ok]
            passes = sum(r.passes for r in ours)
            scaled_greedy = sum(gp * len(r.ids) / gt for gp, gt, r in zip(g_passes, g_tokens, ours, strict=True)
                                if gt)
            point_results.append(PointResult(
                drafter=drafter, budget=point.budget, budget_text="inf" if math.isinf(point.budget) else
                f"{point.budget:g}", gate=point.gate, cap=point.cap,
                is_default=(point.budget, point.gate, point.cap) == (DEFAULT.budget, DEFAULT.gate, DEFAULT.cap),
                relative_tokens_per_s=statistics.median(relative), repeats_relative=relative,
                tokens_per_s=statistics.median(rates), tokens_per_pass=sum(len(r.ids) for r in ours) / max(1, passes),
                passes=passes, passes_saved=scaled_greedy - passes,
                passes_saved_estimate=sum(s.passes_saved for s in summaries if s is not None),
                exceptions=statistics.fmean(s.exceptions if s else 0 for s in summaries),
                regret_spent=statistics.fmean(s.spent if s else 0.0 for s in summaries),
                reused=statistics.fmean(s.reused if s else 0 for s in summaries),
                saved=statistics.fmean(s.saved if s else 0 for s in summaries),
                first_divergence=divergence, diverged=sum(d is not None for d in divergence),
                edit_distance=statistics.fmean(edit_distance(r.ids, ref) for r, ref in zip(ours, g_ids, strict=True)),
                mean_log_prob=_mean(lp), log_prob_delta=_mean(deltas), parses=point_parses,
                parses_kept=all(kept_parse) if kept_parse else None))
    mark_frontier(strict_results, point_results)
    return SweepResult(strict_results, point_results)


def mark_frontier(strict: list[StrictResult], points: list[PointResult]) -> None:
    """Per drafter, mark the points no other point (strict greedy at (1, 0) included) beats on both axes."""
    for drafter in {p.drafter for p in points}:
        mine = [p for p in points if p.drafter == drafter]
        others = [(p.relative_tokens_per_s, p.log_prob_delta or 0.0) for p in mine] + [(1.0, 0.0)]
        for p in mine:
            speed, fidelity = p.relative_tokens_per_s, p.log_prob_delta or 0.0
            p.frontier = not any(s >= speed and f >= fidelity and (s > speed or f > fidelity) for s, f in others)


def frontier(result: SweepResult, drafter: str) -> list[PointResult]:
    """The frontier points of one drafter, fastest first."""
    return sorted((p for p in result.points if p.drafter == drafter and p.frontier),
                  key=lambda p: -p.relative_tokens_per_s)


# ---- reporting ----------------------------------------------------------------------------------

COLUMNS = [("drafter", "drafter", "{}"), ("B", "budget_text", "{}"), ("g", "gate", "{:g}"), ("M", "cap", "{}"),
           ("rel tok/s", "relative_tokens_per_s", "{:.3f}"), ("tok/pass", "tokens_per_pass", "{:.2f}"),
           ("passes saved", "passes_saved", "{:.1f}"), ("exceptions", "exceptions", "{:.1f}"),
           ("regret", "regret_spent", "{:.2f}"), ("reused", "reused", "{:.1f}"),
           ("diverged", "diverged", "{}"), ("edit", "edit_distance", "{:.1f}"),
           ("Δ log p", "log_prob_delta", "{:+.3f}"), ("parses", "parses_kept", "{}"), ("frontier", "frontier", "{}"),
           ("default", "is_default", "{}")]


def table(result: SweepResult, markdown: bool = False) -> str:
    rows = [[title for title, _, _ in COLUMNS]]
    for p in result.points:
        rows.append(["-" if getattr(p, a) is None else f.format(getattr(p, a)) for _, a, f in COLUMNS])
    if markdown:
        lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows[1:]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)


def to_json(result: SweepResult) -> str:
    """Every point and the strict greedy reference; an unbounded B (and any infinity) is written as null."""
    data = {"meta": result.meta, "strict": [asdict(s) for s in result.strict],
            "points": [asdict(p) for p in result.points]}
    return json.dumps(_finite(data), indent=1)


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value
