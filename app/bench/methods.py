"""Benchmark: our decoding methods against autoregressive decoding and HF's own assisted generation.

Every method runs the same committed prompt set with the same K and max new
tokens under greedy decoding, in one process, interleaved (each prompt runs
every method back to back, and repeat r ends before repeat r+1) so that
machine drift cancels. Figures are medians over repeats after a warm-up.
Repetition controls, when set, apply to every method: ours through the
settings, Hugging Face's through generate's own arguments.

Columns: tokens/s; speedup = tokens/s / tokens/s of our autoregressive loop
(measured: a real autoregressive run); from our runs, by app/engine/core/stats.py
(docs/ALGORITHMS.md §7): alpha = accepted / (accepted + passes that ended in
a rejection), rate = accepted / drafted, tokens per pass against E = E(alpha, K)
over the passes' own K, and c = draft time per drafted token over one target
forward of one token; predicted = E(alpha, K) / (K c + 1) over the
passes' actual draft lengths;
efficiency = speedup / predicted; overhead = share of pass time spent outside
the draft and verify forwards; identical = the ids equal our autoregressive
greedy ids; the identity column says "identical", or where the first run that
differs diverged and whether it was a numerical tie of the target's top two
logits (half precision) or a real mismatch (app/engine/core/identity.py).
"""

from __future__ import annotations

import json
import resource
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

import torch

from app.engine.core.stats import GenerationStats, predicted_speedup_of_passes
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import EndEvent, Event, PassEvent
from app.engine.loading import LoadedModels
from app.engine.runtime.devices import synchronize
from app.engine.settings import DecodeSettings, RepetitionSettings

PROMPTS_FILE = Path(__file__).resolve().parents[2] / "assets" / "bench" / "prompts.json"
OURS_AR = "ours:autoregressive"
NO_REPETITION = RepetitionSettings()
Step = Callable[[int, int, str], None]  # (generations done, generations in all, method just run)

# --quick: a first look in about a minute, not a measurement to quote.
QUICK_PROMPTS = 2  # the first code and the first prose prompt
QUICK_MAX_NEW_TOKENS = 32
QUICK_METHODS = frozenset({OURS_AR, "hf:autoregressive", "ours:prompt-lookup", "ours:draft-model", "hf:assisted"})


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    kind: str  # code | prose
    prompt: str
    max_new_tokens: int


@dataclass
class Run:
    token_ids: list[int]
    seconds: float
    passes: list[PassEvent] = field(default_factory=list)
    target_forward_ms: float | None = None  # t_T the decoder measured in this run


@dataclass
class MethodResult:
    method: str
    tokens_per_s: float
    speedup: float | None = None
    alpha: float | None = None
    acceptance_rate: float | None = None
    tokens_per_pass: float | None = None
    expected_tokens_per_pass: float | None = None
    c: float | None = None
    predicted: float | None = None
    efficiency: float | None = None
    overhead: float | None = None
    peak_memory_mb: float | None = None
    identical: bool | None = None
    identity: str | None = None  # "identical" or "diverged at token i, a numerical tie (top-2 gap g)" / mismatch
    repeats_tokens_per_s: list[float] = field(default_factory=list)


HELD_OUT_MAX_NEW_TOKENS = 128  # a held-out prompt set names no token limit: the demo family's evaluation length


def load_prompts(path: Path = PROMPTS_FILE) -> list[BenchPrompt]:
    """The bench's prompt list, or a held-out prompt set (`{"prompts": [{"id", "domain", "text"}]}`, as in
    tools/train/demo_training/heldout_prompts.json), whose prompts run to HELD_OUT_MAX_NEW_TOKENS."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        return [BenchPrompt(name=entry["id"], kind=entry["domain"], prompt=entry["text"],
                            max_new_tokens=HELD_OUT_MAX_NEW_TOKENS) for entry in data["prompts"]]
    return [BenchPrompt(**entry) for entry in data]


def quick_prompts(prompts: list[BenchPrompt], count: int = QUICK_PROMPTS,
                  max_new_tokens: int = QUICK_MAX_NEW_TOKENS) -> list[BenchPrompt]:
    """A few prompts, one of each kind first, each cut to `max_new_tokens`: the prompt set of --quick."""
    firsts: list[BenchPrompt] = []
    for prompt in prompts:
        if all(prompt.kind != first.kind for first in firsts):
            firsts.append(prompt)
    chosen = (firsts + [p for p in prompts if p not in firsts])[:count]
    return [replace(p, max_new_tokens=min(p.max_new_tokens, max_new_tokens)) for p in chosen]


# ---- methods ------------------------------------------------------------------------------------

def timed_generation(decoder: SpeculativeDecoder, prompt: str,
                     settings: DecodeSettings) -> tuple[list[Event], float, EndEvent]:
    """All events of one cold generation (no prefix kept from an earlier one, as for the Hugging Face peers),
    its wall time in seconds (device synchronised) and its end event."""
    decoder.forget_caches()
    started = time.perf_counter()
    events = list(decoder.generate(prompt, settings))
    synchronize(decoder.models.device)
    seconds = time.perf_counter() - started
    end = events[-1]
    if not isinstance(end, EndEvent) or end.reason == "error":
        raise RuntimeError(f"{settings.drafters} failed: {getattr(end, 'error', end)}")
    return events, seconds, end


def ours(decoder: SpeculativeDecoder, drafters: tuple[str, ...], k: int,
         repetition: RepetitionSettings = NO_REPETITION, tree: int | None = None):
    def generate(prompt: BenchPrompt) -> Run:
        settings = DecodeSettings(drafters=drafters, k=k, max_new_tokens=prompt.max_new_tokens, repetition=repetition,
                                  tree=tree)
        events, seconds, end = timed_generation(decoder, prompt.prompt, settings)
        return Run(list(end.token_ids), seconds, [e for e in events if isinstance(e, PassEvent)],
                   end.stats.target_forward_ms)
    return generate


# Assisted generation reads these from the assistant's own generation config (transformers 5 ignores them as
# arguments of generate and drafts 20 tokens, stopping below 0.4 confidence), so they are set there for the call.
ASSISTANT_SETTINGS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


@contextmanager
def assistant_settings(generate_kwargs: dict):
    """Put the assisted-generation settings among `generate_kwargs` into the assistant's config, then restore it."""
    assistant = generate_kwargs.get("assistant_model")
    if assistant is None:
        yield
        return
    config = assistant.generation_config
    saved = {name: getattr(config, name, None) for name in ASSISTANT_SETTINGS}
    for name in ASSISTANT_SETTINGS:
        if name in generate_kwargs:
            setattr(config, name, generate_kwargs[name])
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(config, name, value)


def hf_repetition(repetition: RepetitionSettings) -> dict:
    """generate's arguments for the same repetition controls; none when they are off."""
    if not repetition.active:
        return {}
    return dict(repetition_penalty=float(repetition.penalty), no_repeat_ngram_size=repetition.no_repeat_ngram)


def hf(models: LoadedModels, repetition: RepetitionSettings = NO_REPETITION, **generate_kwargs):
    tokenizer = models.tokenizer
    generate_kwargs = {**hf_repetition(repetition), **generate_kwargs}

    def generate(prompt: BenchPrompt) -> Run:
        ids = tokenizer(prompt.prompt, return_tensors="pt").input_ids.to(models.device)
        started = time.perf_counter()
        with torch.inference_mode(), assistant_settings(generate_kwargs):
            out = models.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                         max_new_tokens=prompt.max_new_tokens,
                                         pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
                                         **generate_kwargs)
        synchronize(models.device)
        return Run(out[0, ids.shape[1]:].tolist(), time.perf_counter() - started)
    return generate


def methods(models: LoadedModels, decoder: SpeculativeDecoder, k: int, exit_layer: int | None = None,
            only: set[str] | None = None,
            repetition: RepetitionSettings = NO_REPETITION) -> dict[str, Callable[[BenchPrompt], Run]]:
    mine, theirs = partial(ours, decoder, k=k, repetition=repetition), partial(hf, models, repetition)
    table = {OURS_AR: mine(()), "hf:autoregressive": theirs()}
    for name in models.available_drafters:
        table[f"ours:{name}"] = mine((name,))
    if models.draft is not None:
        table["ours:prompt-lookup>draft-model"] = mine(("prompt-lookup", "draft-model"))
        table["hf:assisted"] = theirs(assistant_model=models.draft, num_assistant_tokens=k,
                                      num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)
    table["hf:prompt-lookup"] = theirs(prompt_lookup_num_tokens=k)
    if models.num_layers > 1 and getattr(models.target, "base_model_prefix", "") == "model":
        table["hf:early-exit"] = theirs(assistant_early_exit=exit_layer or models.default_exit_layer,
                                        num_assistant_tokens=k, num_assistant_tokens_schedule="constant",
                                        assistant_confidence_threshold=0.0)
    if only:
        table = {name: fn for name, fn in table.items() if name == OURS_AR or name in only}
    return table


# ---- running ------------------------------------------------------------------------------------

def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak RSS (KiB on Linux)


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def count_steps(methods: int, prompts: int, repeats: int) -> int:
    """Generations of one benchmark: a warm-up per method, then every method on every prompt in every repeat."""
    return methods * (1 + prompts * repeats)


def run_interleaved(table: dict[str, Callable], prompts: list[BenchPrompt], repeats: int, device: torch.device,
                    progress: Callable[[str], None], step: Step | None = None,
                    ) -> tuple[dict[str, list[list[Run]]], dict[str, float]]:
    """runs[method][repeat][prompt], after one warm-up run of every method on the first prompt.

    The innermost loop is over methods, so every method meets the same machine state within seconds.
    `step(done, total, method)` is called after each generation (see `count_steps`).
    """
    total, done = count_steps(len(table), len(prompts), repeats), 0

    def advance(name: str) -> None:
        nonlocal done
        done += 1
        if step is not None:
            step(done, total, name)

    for name, generate in table.items():
        progress(f"warm-up {name}")
        generate(prompts[0])
        advance(name)
    runs: dict[str, list[list[Run]]] = {name: [[] for _ in range(repeats)] for name in table}
    peaks = {name: 0.0 for name in table}
    for repeat in range(repeats):
        for index, prompt in enumerate(prompts):
            progress(f"repeat {repeat + 1}/{repeats}, prompt {index + 1}/{len(prompts)} ({prompt.name})")
            for name, generate in table.items():
                _reset_peak(device)
                runs[name][repeat].append(generate(prompt))
                peaks[name] = max(peaks[name], _peak_memory_mb(device))
                advance(name)
    return runs, peaks


def summarise(name: str, repeats: list[list[Run]], baseline_ids: list[list[int]], k: int) -> MethodResult:
    rates = [sum(len(r.token_ids) for r in rep) / sum(r.seconds for r in rep) for rep in repeats]
    result = MethodResult(name, statistics.median(rates), repeats_tokens_per_s=rates)
    result.identical = all([r.token_ids for r in rep] == baseline_ids for rep in repeats)
    runs = [run for rep in repeats for run in rep]
    if any(run.passes for run in runs):
        _add_pass_figures(result, runs)
    return result


def _add_pass_figures(result: MethodResult, runs: list[Run]) -> None:
    """The figures of app/engine/core/stats.py over every pass of every run of one method."""
    stats = GenerationStats()
    for run in runs:
        for event in run.passes:
            stats.add(event)
        if run.target_forward_ms is not None and all(p.drafted for p in run.passes):
            stats.add_forward(run.target_forward_ms)  # t_T of its timed forwards (plain steps were added above)
    passes = [p for run in runs for p in run.passes]
    result.tokens_per_pass = stats.tokens_per_pass
    total = sum(p.timing.total_ms for p in passes)
    forwards = sum(p.timing.draft_ms + p.timing.verify_ms for p in passes)
    result.overhead = 1 - forwards / total if total else None
    result.alpha, result.acceptance_rate, result.c = stats.alpha, stats.acceptance_rate, stats.c
    result.expected_tokens_per_pass = stats.expected_tokens_per_pass
    if result.alpha is not None and result.c is not None:
        result.predicted = predicted_speedup_of_passes(result.alpha, result.c, [len(p.drafted) for p in passes])


def benchmark(models: LoadedModels, prompts: list[BenchPrompt], k: int = 4, repeats: int = 3,
              only: set[str] | None = None, progress: Callable[[str], None] = lambda message: None,
              step: Step | None = None, repetition: RepetitionSettings = NO_REPETITION) -> list[MethodResult]:
    """`progress(message)` names each stage; `step(done, total, method)` follows every generation."""
    decoder = SpeculativeDecoder(models)
    table = methods(models, decoder, k, only=only, repetition=repetition)
    runs, peaks = run_interleaved(table, prompts, repeats, models.device, progress, step)
    baseline_ids = [r.token_ids for r in runs[OURS_AR][0]]
    results = [summarise(name, reps, baseline_ids, k) for name, reps in runs.items()]
    for result in results:
        result.identity = describe_identity(models, decoder, prompts, runs[result.method], baseline_ids, repetition)
    base = next(r.tokens_per_s for r in results if r.method == OURS_AR)
    for result in results:
        result.speedup = result.tokens_per_s / base
        result.peak_memory_mb = peaks[result.method]
        if result.predicted:
            result.efficiency = result.speedup / result.predicted
    return results


def describe_identity(models: LoadedModels, decoder: SpeculativeDecoder, prompts: list[BenchPrompt],
                      repeats: list[list[Run]], baseline_ids: list[list[int]],
                      repetition: RepetitionSettings = NO_REPETITION) -> str:
    """"identical", or the first differing run's divergence judged on the target's logits (a tie or a mismatch)."""
    from app.engine.core.fidelity import first_divergence
    from app.engine.core.identity import classify, logits_at

    for rep in repeats:
        for prompt, run, reference in zip(prompts, rep, baseline_ids, strict=True):
            index = first_divergence(reference, run.token_ids)
            if index is None:
                continue
            logits = None
            if index < min(len(reference), len(run.token_ids)):
                logits = logits_at(models.target, decoder.encode_prompt(prompt.prompt) + reference[:index], repetition)
            return f"{prompt.name}: {classify(reference, run.token_ids, logits, models.dtype)}"
    return "identical"


# ---- reporting ----------------------------------------------------------------------------------

COLUMNS = [("method", "method", "{}"), ("tokens/s", "tokens_per_s", "{:.1f}"), ("speedup", "speedup", "{:.2f}x"),
           ("alpha", "alpha", "{:.2f}"), ("rate", "acceptance_rate", "{:.2f}"),
           ("tok/pass", "tokens_per_pass", "{:.2f}"), ("E", "expected_tokens_per_pass", "{:.2f}"), ("c", "c", "{:.3f}"),
           ("predicted", "predicted", "{:.2f}x"), ("efficiency", "efficiency", "{:.2f}"),
           ("overhead", "overhead", "{:.1%}"), ("peak MB", "peak_memory_mb", "{:.0f}"),
           ("identical", "identity", "{}")]


def _cell(result: MethodResult, attribute: str, fmt: str) -> str:
    value = getattr(result, attribute)
    return "-" if value is None else fmt.format(value)


def table_rows(results: list[MethodResult]) -> Iterator[list[str]]:
    yield [title for title, _, _ in COLUMNS]
    for result in results:
        yield [_cell(result, attribute, fmt) for _, attribute, fmt in COLUMNS]


def markdown_table(results: list[MethodResult]) -> str:
    rows = list(table_rows(results))
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def plain_table(results: list[MethodResult]) -> str:
    rows = list(table_rows(results))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)


def to_json(results: list[MethodResult], meta: dict) -> str:
    return json.dumps({"meta": meta, "results": [asdict(r) for r in results]}, indent=2)
