#!/usr/bin/env python3
"""One command that checks the engine on an accelerator and times real-sized stand-ins, writing JSON.

    python -m tools.device_check --out /tmp/device-check --budget 540     # CUDA, real sizes, fits a 10-minute slot
    python -m tools.device_check --out /tmp/dc --sections profile,timing:llama3.1-8b
    python -m tools.device_check --out /tmp/dc --device cpu --tiny        # the whole script at tiny sizes
    python -m tools.device_check --out DIR --hbm-gbps 3350                # another GPU's memory bandwidth

Installs nothing: it needs what the project declares (torch, transformers, tokenizers; scipy from the test
extra). Every model is built offline with random weights (tests/fixtures). Sections run in this order,
correctness first, each written to DIR/device_check.json as soon as it ends (a later failure or a timeout keeps
the earlier ones); `--sections` chooses some (`timing` is every timing shape), and `--budget SECONDS` skips a
section whose estimated time (SECTION_SECONDS) no longer fits in what is left, saying so
under `skipped`:

- greedy_identity: greedy identity in float32 against `model.generate` (draft model and prompt lookup, on
  several architectures; a divergence is classified as a numerical tie or a real mismatch,
  app/engine/core/identity.py).
- chi_square: chi-square losslessness of speculative sampling (the first two sampled tokens against the
  target's exact joint distribution).
- asd_against_cpu: ASD on the device against the same run on the CPU.
- cache_against_recompute: the KV cache after random rollbacks against a full recompute.
- profile: torch.profiler's key averages (sorted by self CPU time, and by CUDA time on CUDA) of one fast-path
  autoregressive and one fast-path draft-model generation at the Qwen2.5-0.5B shape, written as text beside
  the JSON (profile_<method>.txt), with the counts per token of synchronisations, CUDA graph launches and
  kernel launches outside graphs.
- timing:<shape>: the Qwen2.5-0.5B, Llama-3.2-1B and Llama-3.1-8B shapes (tests/fixtures/real_shapes.py; the
  8B with a Llama-3.2-1B-shaped drafter, the others with a 2-layer one) in the device's dtype, ours
  autoregressive, with prompt lookup and with a draft model, each eager on the dynamic cache and on the fast
  path (app/engine/runtime/execution.py: the static cache, compiled with CUDA graphs on CUDA; on the CPU the static
  cache alone, as compiling is off there by default), beside `model.generate` without and with
  `assistant_model`, and `model.generate` with its own static cache, eager and (on CUDA) compiled, called as
  transformers documents it (`cache_implementation="static"` with a fixed `max_cache_len`, so one compiled
  shape serves every prompt, warmed up with the same shapes): ms per token, the warm-up (compiles) apart, and
  the memory-bandwidth bound of one target forward (weight bytes / HBM bandwidth, `--hbm-gbps`, 4800 GB/s for
  an H200 by default: a parameter, not a measured figure). `goals` compares with the targets: the fast
  autoregressive path within BOUND_GOALS times the bound (1.5x at 8B, 3x at 1B, 6x at 0.5B), the fast draft
  model >= 1.5x assisted generation, eager autoregressive >= 1.0x `generate`.
- compile_load: a compiling load of the Llama-3.1-8B pair (the load-time warm-up, app/engine/loading/warm_up.py)
  in a fresh process with an empty compile cache folder, then again in another fresh process that finds the
  folder filled (a second launch); the stand-ins' random weights are built first and timed apart. Goals: at
  most 60 s cold, 15 s warm.
- half_precision: bfloat16 divergence statistics of the stand-ins on the device (tools/measure/half_precision.py).

`meta` records the device, the GPU's name, and the torch, transformers and CUDA versions.
The exit status is 1 if a check failed or a section raised, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from tools.measure.half_precision import PROMPTS as HALF_PROMPTS

PROMPTS = HALF_PROMPTS[:3]  # code, English prose, repetitive code
IDENTITY_ARCHS = ("llama", "qwen2", "gemma2", "gpt2")
TIMING_SHAPES = ("qwen2.5-0.5b", "llama3.2-1b", "llama3.1-8b")
PROFILE_SHAPE = "qwen2.5-0.5b"
CHECKS = ("greedy_identity", "chi_square", "asd_against_cpu", "cache_against_recompute")
# Estimated seconds per section on an H200 at real sizes (compiles included), from the earlier run of its checks and
# timings with a margin (the profile and compile_load sections are guesses): what --budget plans with.
# Tiny sizes take TINY_SHARE of it.
SECTION_SECONDS = {"greedy_identity": 90, "chi_square": 40, "asd_against_cpu": 25, "cache_against_recompute": 40,
                   "profile": 60, "timing:qwen2.5-0.5b": 110, "timing:llama3.2-1b": 110,
                   "timing:llama3.1-8b": 170, "compile_load": 150, "half_precision": 60}
# The fast autoregressive path's goal, in multiples of the bandwidth bound, per shape; the other goals.
BOUND_GOALS = {"qwen2.5-0.5b": 6.0, "llama3.2-1b": 3.0, "llama3.1-8b": 1.5}
LOAD_SHAPE = "llama3.1-8b"
LOAD_GOALS_S = {"cold": 60.0, "warm": 15.0}
TINY_SHARE = 0.1
# Runtime calls the profile counts per token, by what they are.
PROFILED_CALLS = {"synchronizations": ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"),
                  "graph_launches": ("cudaGraphLaunch",),
                  "kernel_launches_outside_graphs": ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
                                                     "cuLaunchKernelEx")}
FAST = "fast:"  # our methods on the fast path (static cache, compiled on CUDA)
P_MIN = 1e-3  # chi-square p-value below which the sampled distribution is judged not the target's


class Sizes:
    """How much each section does: real or tiny."""

    def __init__(self, tiny: bool) -> None:
        self.identity_archs = IDENTITY_ARCHS[:2] if tiny else IDENTITY_ARCHS
        self.identity_tokens = 12 if tiny else 32
        self.chi_square_samples = 150 if tiny else 1000
        self.asd_tokens = 12 if tiny else 48
        self.cache_rollbacks = 8 if tiny else 25
        self.half_archs = ["llama"] if tiny else None  # None: every stand-in architecture
        self.half_tokens = 8 if tiny else 32
        self.half_prompts = 1 if tiny else 4
        self.timing_tokens = 8 if tiny else 64
        self.profile_tokens = 8 if tiny else 32
        self.timing_prompts = 1 if tiny else 3
        self.k = 4


# ---- checks --------------------------------------------------------------------------------------

def execution_modes(device, compiled: bool) -> dict:
    """The modes a check runs: eager on each cache, and, with `compiled`, compiled on CUDA (its default there;
    compiling takes minutes, so the checks compile for one architecture)."""
    from app.engine.runtime.execution import Execution

    modes = {"eager dynamic": Execution("dynamic"), "eager static": Execution("static")}
    if compiled and device.type == "cuda":
        modes["compiled static"] = Execution("static", compile=True)
    return modes


def check_greedy_identity(pairs: dict, device: str, sizes: Sizes) -> dict:
    """Our greedy ids against model.generate's, float32 on the device, for draft model and prompt lookup, in
    every execution mode."""
    from dataclasses import replace
    from itertools import product

    import torch

    from app.engine.core.fidelity import first_divergence
    from app.engine.core.identity import classify, logits_at
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models
    from app.engine.settings import DecodeSettings

    runs = []
    for arch, (target, draft) in pairs.items():
        models = load_models(str(target), str(draft), device=device, dtype="float32", cache="dynamic")
        decoders = {mode: SpeculativeDecoder(replace(models, execution=execution))
                    for mode, execution in execution_modes(models.device, arch == next(iter(pairs))).items()}
        for prompt in PROMPTS[:2]:
            ids = models.tokenizer(prompt, return_tensors="pt").input_ids.to(models.device)
            with torch.inference_mode():
                out = models.target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                             max_new_tokens=sizes.identity_tokens)
            reference = out[0, ids.shape[1]:].tolist()
            for (mode, decoder), drafter in product(decoders.items(), ("draft-model", "prompt-lookup")):
                end = list(decoder.generate(prompt, DecodeSettings(drafters=(drafter,), k=sizes.k,
                                                                   max_new_tokens=sizes.identity_tokens)))[-1]
                ours = list(end.token_ids)
                index = first_divergence(reference, ours)
                logits = None
                if index is not None and index < min(len(reference), len(ours)):
                    logits = logits_at(models.target, decoder.encode_prompt(prompt) + reference[:index])
                verdict = classify(reference, ours, logits, models.dtype)
                runs.append({"arch": arch, "mode": mode, "drafter": drafter, "prompt": prompt[:20],
                             "verdict": str(verdict),
                             "ok": verdict.identical or verdict.outcome == "tie"})
    return {"passed": all(r["ok"] for r in runs), "runs": runs,
            "identical": sum("identical" in r["verdict"] for r in runs)}


def check_chi_square(pair, device: str, sizes: Sizes) -> dict:
    """Speculative sampling on the device draws the first two tokens from the target's own distribution."""
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models
    from app.engine.settings import DecodeSettings, SamplingSettings
    from tests.engine.helpers import chi_square_pvalue, first_two_distribution  # the suite's own check

    models = load_models(str(pair[0]), str(pair[1]), device=device, dtype="float32")
    decoder = SpeculativeDecoder(models)
    prompt = "the the the the"
    sampling = SamplingSettings(temperature=1.5, top_k=4)
    exact = first_two_distribution(models, prompt, sampling)
    rows = []
    for drafters in (("draft-model",), ("prompt-lookup",)):
        counts: Counter = Counter()
        for seed in range(sizes.chi_square_samples):
            settings = DecodeSettings(drafters=drafters, k=2, max_new_tokens=2, verify="sample", sampling=sampling,
                                      seed=seed)
            counts[tuple(list(decoder.generate(prompt, settings))[-1].token_ids)] += 1
        outside = sum(n for cell, n in counts.items() if cell not in exact)
        pvalue = chi_square_pvalue(counts, exact, sizes.chi_square_samples)
        rows.append({"drafters": list(drafters), "samples": sizes.chi_square_samples, "cells": len(exact),
                     "outside_support": outside, "pvalue": pvalue, "ok": outside == 0 and pvalue > P_MIN})
    return {"passed": all(r["ok"] for r in rows), "rows": rows, "p_min": P_MIN}


def check_asd_against_cpu(pair, device: str, sizes: Sizes) -> dict:
    """ASD on the device commits what it commits on the CPU, with the same ledger."""
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.loading import load_models
    from app.engine.settings import AsdSettings, DecodeSettings

    results = {}
    for where in (device, "cpu"):
        decoder = SpeculativeDecoder(load_models(str(pair[0]), str(pair[1]), device=where, dtype="float32"))
        results[where] = []
        for prompt in PROMPTS:
            settings = DecodeSettings(drafters=("draft-model",), k=sizes.k, max_new_tokens=sizes.asd_tokens,
                                      verify="asd", asd=AsdSettings(budget=3.0, gate=1.0, cap=2))
            end = list(decoder.generate(prompt, settings))[-1]
            results[where].append({"ids": list(end.token_ids), "spent": end.asd.spent if end.asd else None,
                                   "exceptions": end.asd.exceptions if end.asd else None})
    rows = []
    for prompt, ours, cpu in zip(PROMPTS, results[device], results["cpu"], strict=True):
        same_ids = ours["ids"] == cpu["ids"]
        spent_close = (ours["spent"] is not None and cpu["spent"] is not None
                       and abs(ours["spent"] - cpu["spent"]) <= 1e-4 * max(1.0, abs(cpu["spent"])))
        rows.append({"prompt": prompt[:20], "same_ids": same_ids, "spent": [ours["spent"], cpu["spent"]],
                     "exceptions": [ours["exceptions"], cpu["exceptions"]], "ok": same_ids and spent_close})
    return {"passed": all(r["ok"] for r in rows), "rows": rows}


def check_cache(pairs: dict, device: str, sizes: Sizes) -> dict:
    """Cached logits after random rollbacks equal a full recompute without a cache, in every execution mode."""
    from app.engine.loading import load_models
    from app.engine.runtime.cached_model import CachedModel

    rows = []
    for arch, (target, _) in pairs.items():
        model = load_models(str(target), device=device, dtype="float32").target
        for mode, execution in execution_modes(model.device, arch == next(iter(pairs))).items():
            rows.append(cache_against_recompute(arch, mode, CachedModel(model, execution=execution), sizes))
    return {"passed": all(r["ok"] for r in rows), "rows": rows, "tolerance": 1e-3}


def cache_against_recompute(arch: str, mode: str, cached, sizes: Sizes) -> dict:
    """The worst difference between cached logits and a full forward over random blocks and rollbacks."""
    import torch

    model = cached.model
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 600, (12,), generator=gen)
    worst = 0.0
    for _ in range(sizes.cache_rollbacks):
        drafts = torch.randint(3, 600, (rng.randint(0, 5),), generator=gen)
        block = cached.advance_to(torch.cat([ids, drafts]))  # (T, V)
        accepted = rng.randint(0, drafts.numel())
        ids = torch.cat([ids, drafts[:accepted], torch.randint(3, 600, (1,), generator=gen)])
        with torch.inference_mode():
            full = model(input_ids=cached.ids[None].to(model.device)).logits[0, -1].float()  # (V,)
        worst = max(worst, float((block[-1].float() - full).abs().max()))
    return {"arch": arch, "mode": mode, "max_abs_diff": worst, "ok": worst <= 1e-3}


# ---- timing --------------------------------------------------------------------------------------

def time_shape(key: str, device: str, dtype, sizes: Sizes, hbm_gbps: float, tiny: bool) -> dict:
    """ms per token of each method on one stand-in, beside the bandwidth bound of one target forward."""
    from dataclasses import replace

    import torch

    from app.bench.methods import BenchPrompt, hf, ours
    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.runtime.execution import resolve_execution
    from tests.fixtures.real_shapes import stand_in, weight_bytes

    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(torch.device(device))
    started = time.perf_counter()
    models = stand_in(key, device=device, dtype=dtype, with_draft=True, is_tiny=tiny)
    build_s = time.perf_counter() - started
    decoder = SpeculativeDecoder(models)
    # the fast path: a static cache, compiled with CUDA graphs on CUDA (eager on the CPU, where compiling takes minutes)
    fast_models = replace(models, execution=resolve_execution("static", models.device.type == "cuda", models.device))
    fast = SpeculativeDecoder(fast_models)
    k = sizes.k
    # generate's static cache at one length for every prompt and both warm-up lengths: a length of its own per
    # call would be a new compiled shape per call (transformers' documented use fixes it)
    longest = max(len(models.tokenizer(prompt).input_ids) for prompt in PROMPTS) + sizes.timing_tokens
    static_length = 1 << (longest - 1).bit_length()
    table = {
        "ours:autoregressive": ours(decoder, (), k),
        "ours:prompt-lookup": ours(decoder, ("prompt-lookup",), k),
        "ours:draft-model": ours(decoder, ("draft-model",), k),
        FAST + "autoregressive": ours(fast, (), k),
        FAST + "prompt-lookup": ours(fast, ("prompt-lookup",), k),
        FAST + "draft-model": ours(fast, ("draft-model",), k),
        "hf:autoregressive": hf(models),
        "hf:autoregressive static": hf(models, cache_implementation="static", max_cache_len=static_length,
                                       disable_compile=True),
        "hf:prompt-lookup": hf(models, prompt_lookup_num_tokens=k),
        "hf:assisted": hf(models, assistant_model=models.draft, num_assistant_tokens=k,
                          num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0),
    }
    if models.device.type == "cuda":  # generate compiles a static cache's forward by itself on CUDA only
        table["hf:autoregressive static compiled"] = hf(models, cache_implementation="static",
                                                        max_cache_len=static_length)
    prompts = [BenchPrompt(f"p{i}", "code", p, sizes.timing_tokens) for i, p in enumerate(PROMPTS)]
    prompts = prompts[: sizes.timing_prompts]
    warm_up_s = {}
    for name, generate in table.items():  # warm-up: kernels, allocator, caches, and the compiles
        warm_started = time.perf_counter()
        for tokens in sorted({min(8, sizes.timing_tokens), sizes.timing_tokens}):  # every shape the runs meet
            generate(BenchPrompt("warm", "code", PROMPTS[0], tokens))
        warm_up_s[name] = time.perf_counter() - warm_started
    seconds = dict.fromkeys(table, 0.0)
    tokens = dict.fromkeys(table, 0)
    passes = dict.fromkeys(table, 0)
    reference: dict[str, list[int]] = {}
    identical = dict.fromkeys(table, True)
    for prompt in prompts:
        for name, generate in table.items():  # interleaved: every method meets the same machine state
            run = generate(prompt)
            seconds[name] += run.seconds
            tokens[name] += len(run.token_ids)
            passes[name] += len(run.passes)
            reference.setdefault(prompt.name, run.token_ids)
            identical[name] &= run.token_ids == reference[prompt.name]
    target_bytes, draft_bytes = weight_bytes(models.target), weight_bytes(models.draft)
    bound_ms = 1e3 * target_bytes / (hbm_gbps * 1e9)
    rows = []
    for name in table:
        ms = 1e3 * seconds[name] / tokens[name]
        rows.append({"method": name, "ms_per_token": ms, "tokens": tokens[name],
                     "tokens_per_pass": tokens[name] / passes[name] if passes[name] else None,
                     "times_bound": ms / bound_ms, "identical_to_ours_autoregressive": identical[name],
                     "warm_up_s": warm_up_s[name]})
    memory = torch.cuda.max_memory_allocated(models.device) / 2**20 if models.device.type == "cuda" else None
    ms_of = {row["method"]: row["ms_per_token"] for row in rows}
    goals = {"fast_autoregressive_times_bound": ms_of[FAST + "autoregressive"] / bound_ms,
             "fast_autoregressive_bound_goal": BOUND_GOALS[key],
             "fast_draft_model_vs_hf_assisted": ms_of["hf:assisted"] / ms_of[FAST + "draft-model"],
             "eager_draft_model_vs_hf_assisted": ms_of["hf:assisted"] / ms_of["ours:draft-model"],
             "eager_autoregressive_vs_generate": ms_of["hf:autoregressive"] / ms_of["ours:autoregressive"]}
    return {"shape": models.target_name, "dtype": str(dtype).removeprefix("torch."), "vocab": models.vocab_size,
            "layers": models.num_layers, "target_weight_mb": target_bytes / 2**20,
            "draft_weight_mb": draft_bytes / 2**20, "hbm_gbps": hbm_gbps, "bound_ms_per_forward": bound_ms,
            "build_s": build_s, "peak_memory_mb": memory,
            "fast_path": {"mode": fast_models.execution.label, "cache": "static" if fast.target.static else "dynamic",
                          "compiled": fast.target.compiled,
                          "compile_failure": fast_models.execution.compile_failure},
            "goals": goals, "rows": rows}


# ---- compile load --------------------------------------------------------------------------------

def compile_load(key: str, device: str, dtype, tiny: bool) -> dict:
    """A compiling load cold and warm: each in a fresh process (dynamo forgets everything at exit; the compile
    cache folder is what a second launch finds), the first with that folder empty."""
    import subprocess

    command = [sys.executable, "-m", "tools.device_check", "--compile-load-child", key, "--device", device,
               "--timing-dtype", str(dtype).removeprefix("torch."), "--out", "."] + (["--tiny"] if tiny else [])
    runs = {}
    with tempfile.TemporaryDirectory() as cache_folder:
        env = dict(os.environ, SPEC_PLAYGROUND_CACHE=cache_folder, HF_HUB_OFFLINE="1")
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the engine's own folder per models, as a user gets it
        for launch in ("cold", "warm"):
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True,
                                  cwd=Path(__file__).resolve().parent.parent)
            runs[launch] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"shape": runs["cold"]["shape"], **runs,
            "goals": {launch: {"seconds": runs[launch]["compile_s"], "goal_s": LOAD_GOALS_S[launch],
                               "met": runs[launch]["compile_s"] <= LOAD_GOALS_S[launch]} for launch in runs}}


def compile_load_child(key: str, device: str, dtype, tiny: bool) -> dict:
    """In this process: build the stand-in pair, then time the compiling load's warm-up."""
    from dataclasses import replace

    from app.engine.loading.warm_up import warm_up
    from app.engine.runtime.execution import Execution
    from tests.fixtures.real_shapes import stand_in

    started = time.perf_counter()
    models = stand_in(key, device=device, dtype=dtype, with_draft=True, is_tiny=tiny)
    build_s = time.perf_counter() - started
    models = replace(models, execution=Execution("static", compile=True))
    steps: list[str] = []
    started = time.perf_counter()
    warm_up(models, lambda fraction, message: steps.append(message))
    return {"shape": models.target_name, "build_s": round(build_s, 1),
            "compile_s": round(time.perf_counter() - started, 1), "steps": len(steps),
            "compile_failure": models.execution.compile_failure}


# ---- profile -------------------------------------------------------------------------------------

def profile_fast_path(key: str, device: str, dtype, sizes: Sizes, tiny: bool, out: Path) -> dict:
    """torch.profiler over one fast-path autoregressive and one fast-path draft-model generation (each after a
    warm-up run of the same settings): the key averages as text files, and per token the runtime calls of
    PROFILED_CALLS (on the CPU there are none: the counts are 0)."""
    from dataclasses import replace

    from torch.profiler import ProfilerActivity, profile

    from app.engine.decoding.decoder import SpeculativeDecoder
    from app.engine.runtime.execution import resolve_execution
    from app.engine.settings import DecodeSettings
    from tests.fixtures.real_shapes import stand_in

    models = stand_in(key, device=device, dtype=dtype, with_draft=True, is_tiny=tiny)
    cuda = models.device.type == "cuda"
    fast = SpeculativeDecoder(replace(models, execution=resolve_execution("static", cuda, models.device)))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    rows = []
    for method, drafters in (("autoregressive", ()), ("draft-model", ("draft-model",))):
        settings = DecodeSettings(drafters=drafters, k=sizes.k, max_new_tokens=sizes.profile_tokens)
        list(fast.generate(PROMPTS[0], settings))  # compiles, captures, allocations
        with profile(activities=activities) as profiler:
            end = list(fast.generate(PROMPTS[0], settings))[-1]
        tokens = max(1, len(end.token_ids))
        averages = profiler.key_averages()
        calls = {kind: sum(event.count for event in averages if event.key in names) / tokens
                 for kind, names in PROFILED_CALLS.items()}
        text = [f"{models.target_name}, fast path ({fast.models.execution.label}), {method}, {tokens} tokens",
                "\nsorted by self CPU time\n", averages.table(sort_by="self_cpu_time_total", row_limit=40)]
        if cuda:
            text += ["\nsorted by CUDA time\n", averages.table(sort_by="cuda_time_total", row_limit=40)]
        name = f"profile_{method}.txt"
        (out / name).write_text("\n".join(text) + "\n")
        rows.append({"method": method, "tokens": tokens, "per_token": calls, "file": name,
                     "mode": fast.models.execution.label})
    return {"shape": models.target_name, "dtype": str(dtype).removeprefix("torch."), "rows": rows}


# ---- the command ---------------------------------------------------------------------------------

def environment(device: str) -> dict:
    import torch

    from app.bench.methods import software_versions

    info = {"device": device, **software_versions(torch.device(device)), "python": platform.python_version(),
            "cpus": os.cpu_count(), "load_average": list(os.getloadavg())}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu_memory_gb"] = torch.cuda.get_device_properties(torch.device(device)).total_memory / 1e9
    return info


def section_names() -> list[str]:
    """Every section, in the order they run: correctness first."""
    return [*CHECKS, "profile", *(f"timing:{key}" for key in TIMING_SHAPES), "compile_load", "half_precision"]


def chosen_sections(text: str | None) -> list[str]:
    """The sections `--sections` names (comma-separated; `timing` is every shape), in running order."""
    every = section_names()
    if not text:
        return every
    asked = {name.strip() for name in text.split(",") if name.strip()}
    asked = {name for name in every if name in asked or (name.startswith("timing:") and "timing" in asked)}
    unknown = {name.strip() for name in text.split(",")} - set(every) - {"timing", ""}
    if unknown:
        raise ValueError(f"unknown section(s) {', '.join(sorted(unknown))}: choose from timing, {', '.join(every)}")
    return [name for name in every if name in asked]


def timing_dtype(args: argparse.Namespace):
    import torch

    return {"auto": torch.bfloat16 if args.device != "cpu" else torch.float32, "float32": torch.float32,
            "bfloat16": torch.bfloat16, "float16": torch.float16}[args.timing_dtype]


def run(args: argparse.Namespace) -> dict:
    from tests.fixtures.architectures import available, build_pair

    out_file = args.out / "device_check.json"
    sizes = Sizes(args.tiny)
    dtype = timing_dtype(args)
    chosen = chosen_sections(args.sections)
    report: dict = {"meta": {**environment(args.device), "tiny": args.tiny, "hbm_gbps": args.hbm_gbps,
                             "budget_s": args.budget, "sections": chosen,
                             "started": time.strftime("%Y-%m-%d %H:%M:%S")},
                    "checks": {}, "profile": None, "half_precision": None, "timing": [], "compile_load": None,
                    "skipped": [],
                    "errors": []}
    started = time.perf_counter()
    share = TINY_SHARE if args.tiny else 1.0

    def save() -> None:
        report["meta"]["seconds"] = round(time.perf_counter() - started, 1)
        out_file.write_text(json.dumps(report, indent=2))

    def section(name: str, fn, store) -> None:
        if name not in chosen:
            return
        left = None if args.budget is None else args.budget - (time.perf_counter() - started)
        needs = SECTION_SECONDS[name] * share
        if left is not None and needs > left:
            report["skipped"].append({"section": name, "reason": f"needs about {needs:.0f} s, {left:.0f} s left"})
            print(f"{name}: skipped, needs about {needs:.0f} s of the {left:.0f} s left", file=sys.stderr, flush=True)
            save()
            return
        t0 = time.perf_counter()
        print(f"{name} ...", file=sys.stderr, flush=True)
        try:
            store(fn())
        except Exception as exc:  # noqa: BLE001 - one broken section must not lose the others
            report["errors"].append({"section": name, "error": f"{type(exc).__name__}: {exc}",
                                     "traceback": traceback.format_exc()})
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        save()

    checks = report["checks"]
    if set(chosen) & set(CHECKS):
        with tempfile.TemporaryDirectory() as folder:
            pairs = {arch: build_pair(Path(folder) / arch, arch) for arch in sizes.identity_archs
                     if not available(arch)}
            first = next(iter(pairs.values()))
            section("greedy_identity", lambda: check_greedy_identity(pairs, args.device, sizes),
                    lambda r: checks.__setitem__("greedy_identity", r))
            section("chi_square", lambda: check_chi_square(first, args.device, sizes),
                    lambda r: checks.__setitem__("chi_square", r))
            section("asd_against_cpu", lambda: check_asd_against_cpu(first, args.device, sizes),
                    lambda r: checks.__setitem__("asd_against_cpu", r))
            section("cache_against_recompute", lambda: check_cache(pairs, args.device, sizes),
                    lambda r: checks.__setitem__("cache_against_recompute", r))

    section("profile", lambda: profile_fast_path(PROFILE_SHAPE, args.device, dtype, sizes, args.tiny, args.out),
            lambda r: report.__setitem__("profile", r))
    for key in TIMING_SHAPES:
        section(f"timing:{key}",
                lambda key=key: time_shape(key, args.device, dtype, sizes, args.hbm_gbps, args.tiny),
                report["timing"].append)
    section("compile_load", lambda: compile_load(LOAD_SHAPE, args.device, dtype, args.tiny),
            lambda r: report.__setitem__("compile_load", r))

    def half() -> dict:
        from tests.fixtures.architectures import ARCHITECTURES
        from tools.measure.half_precision import markdown, measure

        result = measure("bfloat16", sizes.half_tokens, sizes.k, sizes.half_archs or list(ARCHITECTURES),
                         device=args.device, prompts=HALF_PROMPTS[: sizes.half_prompts])
        result["markdown"] = markdown(result)
        return result

    section("half_precision", half, lambda r: report.__setitem__("half_precision", r))
    report["passed"] = not report["errors"] and all(c.get("passed") for c in report["checks"].values())
    save()
    return report


def summary(report: dict) -> str:
    meta = report["meta"]
    lines = [f"device {meta['device']} ({meta.get('gpu') or 'no GPU name'}), torch {meta['torch']}, "
             f"transformers {meta['transformers']}, CUDA {meta['cuda']}, {meta['seconds']} s, "
             f"{'PASSED' if report['passed'] else 'FAILED'}"]
    for name, check in report["checks"].items():
        lines.append(f"  {name}: {'ok' if check['passed'] else 'FAILED'}")
    for error in report["errors"]:
        lines.append(f"  error in {error['section']}: {error['error']}")
    for skipped in report["skipped"]:
        lines.append(f"  skipped {skipped['section']}: {skipped['reason']}")
    for row in (report["profile"] or {}).get("rows", []):
        counts = ", ".join(f"{kind.replace('_', ' ')} {count:.1f}" for kind, count in row["per_token"].items())
        lines.append(f"  profile {row['method']} ({row['file']}), per token: {counts}")
    if report["half_precision"]:
        lines.append(report["half_precision"]["markdown"])
    for shape in report["timing"]:
        fast, goals = shape["fast_path"], shape["goals"]
        lines.append(f"\n{shape['shape']} {shape['dtype']}: {shape['target_weight_mb']:.0f} MB of weights, bound "
                     f"{shape['bound_ms_per_forward']:.3f} ms per forward at {shape['hbm_gbps']:.0f} GB/s; fast path: "
                     f"{fast['mode']}" + (f" (compile failed: {fast['compile_failure']})" if fast["compile_failure"]
                                          else ""))
        lines.append(f"goals: fast autoregressive {goals['fast_autoregressive_times_bound']:.1f}x the bound "
                     f"(goal <= {goals['fast_autoregressive_bound_goal']:g}), fast draft model "
                     f"{goals['fast_draft_model_vs_hf_assisted']:.2f}x HF assisted (goal >= 1.5; eager "
                     f"{goals['eager_draft_model_vs_hf_assisted']:.2f}x), eager autoregressive "
                     f"{goals['eager_autoregressive_vs_generate']:.2f}x generate (goal >= 1.0)")
        lines.append("| method | ms / token | x bound | tokens / pass | identical | warm-up s |")
        lines.append("|---|---|---|---|---|---|")
        for row in shape["rows"]:
            tpp = "-" if row["tokens_per_pass"] is None else f"{row['tokens_per_pass']:.2f}"
            lines.append(f"| {row['method']} | {row['ms_per_token']:.2f} | {row['times_bound']:.1f} | {tpp} | "
                         f"{row['identical_to_ours_autoregressive']} | {row['warm_up_s']:.1f} |")
    load = report["compile_load"]
    if load:
        times = [f"{launch} {goal['seconds']:.1f} s (goal <= {goal['goal_s']:g} s)"
                 for launch, goal in load["goals"].items()]
        lines.append(f"\ncompiling load of {load['shape']}: " + ", ".join(times))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for device_check.json (created)")
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, mps or cpu (default cuda)")
    parser.add_argument("--tiny", action="store_true", help="every section at tiny sizes (a smoke test)")
    parser.add_argument("--hbm-gbps", type=float, default=4800.0,
                        help="the device's memory bandwidth in GB/s for the bound (default 4800, an H200's "
                             "nominal ~4.8 TB/s)")
    parser.add_argument("--timing-dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                        help="dtype of the timed stand-ins (default auto: bfloat16 on an accelerator, float32 on cpu)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--sections", help=f"comma-separated sections to run, in this order: "
                                           f"{', '.join(section_names())} (timing: every shape; default all)")
    parser.add_argument("--budget", type=float, help="seconds the whole run may take: a section whose estimate no "
                                                     "longer fits is skipped (default: no limit)")
    parser.add_argument("--compile-load-child", metavar="SHAPE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compile_load_child:
        print(json.dumps(compile_load_child(args.compile_load_child, args.device, timing_dtype(args),
                                            args.tiny)))
        return 0
    try:
        chosen_sections(args.sections)
    except ValueError as exc:
        parser.error(str(exc))
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    report = run(args)
    print(summary(report))
    print(f"\nwritten to {args.out / 'device_check.json'}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
