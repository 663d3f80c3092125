"""Chain against tree (docs/ALGORITHMS.md §9): the same drafter drafting a chain of K and trees of N nodes, K deep.

Every variant runs the bench prompts under greedy decoding, interleaved per
prompt with the others and with our autoregressive loop (the speed baseline),
medians over repeats after a warm-up, as in `bench.py`. Per variant: tokens/s,
speedup over autoregressive decoding, tokens per pass against the expected
value (E(α, K) for chains, the tree model of §9.4 for trees), the tree's
tokens per pass over the chain's, and the median verification forward in ms,
which shows what verifying N + 1 rows costs on this device.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.bench.methods import OURS_AR, BenchPrompt, Run, Step, ours, run_interleaved, summarise
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.loading import LoadedModels

BUDGETS = (4, 8, 16, 32)
DRAFTERS = ("draft-model", "eagle", "medusa", "prompt-lookup")


@dataclass
class TreeResult:
    drafter: str
    budget: int | None  # N; None = the chain
    tokens_per_s: float
    speedup: float  # over our autoregressive loop
    tokens_per_pass: float | None
    expected_tokens_per_pass: float | None
    verify_ms: float | None  # median verification forward of a drafting pass
    identical: bool
    tokens_per_pass_vs_chain: float | None = None
    tokens_per_s_vs_chain: float | None = None


def variant_name(drafter: str, budget: int | None) -> str:
    return f"{drafter} chain" if budget is None else f"{drafter} tree {budget}"


def variants(decoder: SpeculativeDecoder, drafters: Sequence[str], budgets: Sequence[int],
             k: int) -> dict[str, Callable[[BenchPrompt], Run]]:
    table = {OURS_AR: ours(decoder, (), k)}
    for drafter in drafters:
        for budget in (None, *budgets):
            table[variant_name(drafter, budget)] = ours(decoder, (drafter,), k, tree=budget)
    return table


def compare(models: LoadedModels, prompts: list[BenchPrompt], drafters: Sequence[str] = DRAFTERS,
            budgets: Sequence[int] = BUDGETS, k: int = 4, repeats: int = 3,
            progress: Callable[[str], None] = lambda message: None, step: Step | None = None) -> list[TreeResult]:
    drafters = [name for name in drafters if name in models.available_drafters]
    decoder = SpeculativeDecoder(models)
    runs, _ = run_interleaved(variants(decoder, drafters, budgets, k), prompts, repeats, models.device, progress, step)
    baseline_ids = [r.token_ids for r in runs[OURS_AR][0]]
    base = summarise(OURS_AR, runs[OURS_AR], baseline_ids, k).tokens_per_s
    results = []
    for drafter in drafters:
        chain = None
        for budget in (None, *budgets):
            reps = runs[variant_name(drafter, budget)]
            method = summarise(variant_name(drafter, budget), reps, baseline_ids, k)
            verify = [p.timing.verify_ms for rep in reps for run in rep for p in run.passes
                      if p.drafted and not p.timing.prompt_tokens]
            result = TreeResult(drafter, budget, method.tokens_per_s, method.tokens_per_s / base,
                                method.tokens_per_pass, method.expected_tokens_per_pass,
                                statistics.median(verify) if verify else None, bool(method.identical))
            chain = chain or result
            if chain.tokens_per_pass:
                result.tokens_per_pass_vs_chain = (result.tokens_per_pass or 0.0) / chain.tokens_per_pass
            result.tokens_per_s_vs_chain = result.tokens_per_s / chain.tokens_per_s
            results.append(result)
    return results


def _cell(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def table(results: list[TreeResult], markdown: bool = False) -> str:
    header = ["drafter", "draft", "tok/s", "speedup", "tok/pass", "expected", "x chain tok/pass", "x chain tok/s",
              "verify ms", "identical"]
    rows = [[r.drafter, "chain" if r.budget is None else f"tree {r.budget}", _cell(r.tokens_per_s, ".1f"),
             _cell(r.speedup, ".2f"), _cell(r.tokens_per_pass, ".2f"), _cell(r.expected_tokens_per_pass, ".2f"),
             _cell(r.tokens_per_pass_vs_chain, ".2f"), _cell(r.tokens_per_s_vs_chain, ".2f"),
             _cell(r.verify_ms, ".1f"), "yes" if r.identical else "NO"] for r in results]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)) for row in [header, *rows])
