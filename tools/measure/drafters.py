#!/usr/bin/env python3
"""Measure the learned drafters next to the draft model, prompt lookup and layer skip on the demo target.

    python -m tools.measure.drafters                  # prints JSON, updates "## Learned drafters" in the card
    python -m tools.measure.drafters --no-card --repeats 1
    python -m tools.measure.drafters --target DIR/target --draft DIR/draft --heads DIR/heads --no-card \
        --prompts tools/train/demo_training/heldout_prompts.json

Two measurements, both greedy, in one process:

1. Top-1 agreement per draft position on held-out text (teacher-forced): at
   anchors t of held-out blocks, each drafter drafts K tokens after x_0 .. x_t
   and the target writes its own greedy chain g_0 .. g_{K-1}; position j scores
   P(d_j = g_j | d_i = g_i for all i < j), the acceptance rate of that position
   under greedy verification. Its product gives the expected accepted length.
   Held-out text: the split of the corpus the target was trained on (its prose
   source as the family folder records it, else the pydoc topics; --prose-source).
2. Speculative decoding with the real engine at K = 4 on a held-out prompt set
   (the card's code prompts and openings of held-out prose, or --prompts FILE):
   alpha (accepted over tested positions, the alpha of E(alpha, K)), the
   acceptance rate (accepted over drafted), tokens per pass, measured c (draft time per drafted token over
   verification time per pass) and speed-up = autoregressive time / drafter
   time, from medians of repeated runs (drafters interleaved in each repeat so
   a change in machine load hits all of them alike).
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

from app.engine.core.sampling import TokenSampler
from app.engine.core.stats import Acceptance
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters import build_drafter
from app.engine.events import EndEvent, PassEvent
from app.engine.loading import load_models
from app.engine.loading.load import DEMO_DIR, folder_repetition
from app.engine.runtime.cached_model import CachedModel
from app.engine.settings import DecodeSettings, DrafterOptions, RepetitionSettings
from tools.options import add_docs_dir, add_threads
from tools.train.demo_training.corpus import PROSE_SOURCES, CorpusSplit
from tools.train.demo_training.data import pack_blocks, spread_blocks
from tools.train.demo_training.evaluation import CODE_PROMPTS
from tools.train.demo_training.model_card import heldout_split, upsert_section
from tools.train.demo_training.python_docs import PythonDocsMissing
from tools.train.head_training.lineage import lineage_record, lineage_words

REPO_ROOT = Path(__file__).resolve().parents[2]

LEARNED = ("medusa", "mtp", "eagle", "dflash")
BASELINES = ("draft-model", "prompt-lookup", "layer-skip")
SECTION = "## Learned drafters"
K = 4


# ---- teacher-forced agreement -------------------------------------------------------------------


def heldout_blocks(tokenizer, split: CorpusSplit, block: int, per_domain: int) -> list[torch.Tensor]:
    blocks = []
    for documents in (split.heldout_code, split.heldout_prose):
        ids: list[int] = []
        for text in (d.text for d in documents):
            ids += [tokenizer.eos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]
        blocks += list(spread_blocks(pack_blocks(torch.tensor(ids), block), per_domain))
    return blocks


def greedy_chain(cached: CachedModel, prefix: torch.Tensor, k: int) -> list[int]:
    """The target's own next k greedy tokens after `prefix`."""
    logits = cached.advance_to(prefix)[-1]
    chain = [int(logits.argmax())]
    for _ in range(k - 1):
        chain.append(int(cached.extend(torch.tensor(chain[-1:]))[-1].argmax()))
    return chain


def agreement(models, names, blocks: list[torch.Tensor], stride: int) -> dict[str, list[float]]:
    """Conditional top-1 agreement per draft position for each drafter in `names`."""
    sampler = TokenSampler(None, torch.Generator())
    drafters = {name: build_drafter(name, models, DrafterOptions()) for name in names}
    reached = {name: [0] * K for name in names}
    agreed = {name: [0] * K for name in names}
    chain_model = CachedModel(models.target)
    for block in blocks:
        with torch.inference_mode():
            hidden = models.target(input_ids=block[None].to(models.device), output_hidden_states=True).hidden_states
        for t in range(16, block.numel() - 1, stride):
            prefix = block[: t + 1]
            truth = greedy_chain(chain_model, prefix, K)
            for name, drafter in drafters.items():
                features = [hidden[layer][0, :t] for layer in drafter.feature_layers] or None
                draft = drafter.propose(prefix, K, sampler, features)
                tokens = draft.tokens.tolist() if draft is not None else []
                for j in range(K):
                    reached[name][j] += 1
                    if j >= len(tokens) or tokens[j] != truth[j]:
                        break
                    agreed[name][j] += 1
    return {name: [agreed[name][j] / max(1, reached[name][j]) for j in range(K)] for name in names}


# ---- speculative decoding speed -----------------------------------------------------------------


def prompt_set(tokenizer, split: CorpusSplit, count: int = 3) -> list[str]:
    """The demo card's code prompts plus the openings of held-out prose documents."""
    prose = split.heldout_prose[:count]
    openings = [tokenizer.decode(tokenizer(d.text, add_special_tokens=False)["input_ids"][:24]) for d in prose]
    return list(CODE_PROMPTS) + openings


def prompt_file(path: Path) -> list[str]:
    """The prompt texts of a prompt file such as tools/train/demo_training/heldout_prompts.json."""
    return [p["text"] for p in json.loads(Path(path).read_text())["prompts"]]


def generate(decoder: SpeculativeDecoder, prompt: str, drafters: tuple[str, ...], max_new: int,
             repetition: RepetitionSettings | None = None) -> dict:
    settings = DecodeSettings(drafters=drafters, k=K, max_new_tokens=max_new,
                              repetition=repetition or RepetitionSettings())
    passes, acceptance, started = 0, Acceptance(), time.perf_counter()
    for event in decoder.generate(prompt, settings):
        if isinstance(event, PassEvent):
            passes += 1
            acceptance.add(event.drafted)
        end = event
    seconds = time.perf_counter() - started
    assert isinstance(end, EndEvent) and end.reason != "error", end
    return {"seconds": seconds, "tokens": list(end.token_ids), "passes": passes, "acceptance": acceptance,
            "c": end.stats.c}


def speed(models, names, prompts: list[str], repeats: int, max_new: int,
          repetition: RepetitionSettings | None = None) -> dict:
    """Engine runs with the family's suggested repetition controls (`repetition`), as the window starts."""
    decoder = SpeculativeDecoder(models)
    runs = {name: {p: [] for p in prompts} for name in ("autoregressive", *names)}
    for prompt in prompts:  # warm-up: allocators, caches, lazy imports
        generate(decoder, prompt, (), 8)
    for _ in range(repeats):
        for prompt in prompts:
            for name in runs:
                runs[name][prompt].append(generate(decoder, prompt, () if name == "autoregressive" else (name,),
                                                   max_new, repetition))
    reference = runs["autoregressive"]
    ar_seconds = sum(statistics.median(r["seconds"] for r in reference[p]) for p in prompts)
    summary = {}
    for name, by_prompt in runs.items():
        first = [by_prompt[p][0] for p in prompts]
        identical = all(r["tokens"] == reference[p][0]["tokens"] for p, r in zip(prompts, first, strict=True))
        assert identical, name  # greedy identity
        seconds = sum(statistics.median(r["seconds"] for r in by_prompt[p]) for p in prompts)
        acceptance = sum((r["acceptance"] for r in first), Acceptance())
        cs = [r["c"] for p in prompts for r in by_prompt[p] if r["c"] is not None]
        summary[name] = {
            "alpha": acceptance.alpha,
            "acceptance_rate": acceptance.acceptance_rate,
            "tokens_per_pass": sum(len(r["tokens"]) for r in first) / sum(r["passes"] for r in first),
            "c": statistics.median(cs) if cs else None,
            "seconds": round(seconds, 3),
            "speedup": ar_seconds / seconds,
        }
    return summary


# ---- model card ----------------------------------------------------------------------------------


def repetition_text(repetition: dict) -> str:
    controls = RepetitionSettings(**repetition) if repetition else RepetitionSettings()
    return f"{controls.describe()} (the family's suggestion)" if controls.active else "no repetition control"


def fmt(value, pattern: str = "{:.2f}") -> str:
    return "–" if value is None else pattern.format(value)


def data_words(head: dict) -> str:
    """How the target's text in the head's data was written (`train_heads.py --generation-penalty`) and how its
    labels were made (`--label-penalty`, `--hard-label-weight`)."""
    penalty = head.get("generation_penalty", 1.0)
    text = "; text without a repetition penalty" if penalty == 1.0 else f"; text under repetition penalty {penalty}"
    label_penalty = head.get("label_penalty", 1.0)
    labels = "" if label_penalty == 1.0 else f"; labels under repetition penalty {label_penalty}"
    hard = head.get("hard_label_weight", 0.0)
    return text + labels + ("" if hard == 0.0 else f"; {hard:g} of each label on the target's argmax")


def render_section(report: dict) -> str:
    heads = report["heads"]
    lines = [SECTION, "",
             "Trained with `python -m tools.train.heads` against the frozen target (self-distillation: labels are "
             "the target's own top-8 probabilities on the demo corpus and on text the target wrote); weights under "
             "`heads/<family>/` (fp16; each borrows the target's embeddings and LM head, format in `heads/FORMAT.md`). "
             f"Measured with `python -m tools.measure.drafters` ({report['hardware']}).", "",
             "| drafter | what | parameters | training |", "|---|---|---|---|"]
    for name in LEARNED:
        if name in heads:
            h = heads[name]
            lines.append(f"| `{name}` | {h['what']} | {h['parameters'] / 1e6:.2f} M | "
                         f"`--run {h['run']}`: {lineage_words(h['lineage'])}, {h['seconds'] / 60:.1f} min"
                         f"{data_words(h)} |")
    agreement_rows = report["agreement"]
    lines += ["", f"Top-1 agreement with the target per draft position, teacher-forced on held-out text "
              f"({report['anchors']} anchors in held-out code and prose; position j counts only anchors where "
              "drafts 1 .. j-1 matched the target's greedy chain, so it is the greedy acceptance rate of that "
              "position):", "",
              "| drafter | 1 | 2 | 3 | 4 | expected accepted of 4 |", "|---|---|---|---|---|---|"]
    for name, rates in agreement_rows.items():
        expected, running = 0.0, 1.0
        for rate in rates:
            running *= rate
            expected += running
        lines.append(f"| `{name}` | " + " | ".join(f"{100 * r:.1f} %" for r in rates) + f" | {expected:.2f} |")
    lines += ["", f"Greedy speculative decoding with the engine, K = {K}, {report['prompts']} held-out prompts x "
              f"{report['max_new_tokens']} new tokens, {repetition_text(report.get('repetition', {}))}, median of "
              f"{report['repeats']} repeats (alpha = accepted / tested positions, the alpha of E(alpha, K); "
              "acceptance rate = accepted / drafted; c = draft time per drafted token / verification time per "
              "pass; speed-up = autoregressive wall time / drafter wall time, same process):", "",
              "| drafter | alpha | acceptance rate | tokens per pass | c | speed-up |", "|---|---|---|---|---|---|"]
    for name, row in report["speed"].items():
        lines.append(f"| `{name}` | {fmt(row['alpha'], '{:.3f}')} | {fmt(row['acceptance_rate'], '{:.3f}')} | "
                     f"{row['tokens_per_pass']:.2f} | {fmt(row['c'], '{:.3f}')} | {row['speedup']:.2f}x |")
    lines += ["", "Every run's output equals autoregressive greedy decoding token for token. CPU timings on a "
              "machine shared with other jobs: compare rows with each other, not across machines.", ""]
    return "\n".join(lines)


WHAT = {"medusa": "residual heads on the last hidden state",
        "mtp": "sequential depth modules, one block each",
        "eagle": "one decoder layer over fused low/mid/high features",
        "dflash": "block drafter, one bidirectional forward"}


def head_summary(models) -> dict:
    out = {}
    for name, spec in models.heads.items():
        training = spec.config.training
        out[name] = {"what": WHAT.get(name, name), "parameters": sum(p.numel() for p in spec.module.parameters()),
                     "seconds": training.get("seconds", 0.0),
                     "run": training.get("run", "full"),
                     "generation_penalty": training.get("generation_penalty", 1.0),  # 1.0 before it was recorded
                     "label_penalty": training.get("label_penalty", 1.0),
                     "hard_label_weight": training.get("hard_label_weight", 0.0),
                     "lineage": lineage_record(training)}
    return out


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", help="heads folder (default: the demo's)")
    parser.add_argument("--target", help="target folder (default: the demo family, from playground.json)")
    parser.add_argument("--draft", help="draft model folder (with --target)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--blocks", type=int, default=8, help="held-out blocks per domain for agreement")
    parser.add_argument("--stride", type=int, default=8, help="anchor spacing inside a block")
    parser.add_argument("--prompts", type=Path, default=None,
                        help="prompt file for the speed runs (JSON with a 'prompts' list of {'text': ...}, as "
                             "tools/train/demo_training/heldout_prompts.json); default: the card's code prompts and "
                             "three held-out prose openings")
    parser.add_argument("--prose-source", choices=PROSE_SOURCES, default=None,
                        help="held-out prose: pydoc or docs; default: what the target's family folder records, "
                             "else pydoc")
    add_docs_dir(parser)
    add_threads(parser)
    parser.add_argument("--card", type=Path, default=DEMO_DIR / "MODEL_CARD.md")
    parser.add_argument("--no-card", action="store_true")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    models = load_models(args.target, args.draft, device="cpu", dtype="float32", heads=args.heads)
    names = [n for n in BASELINES + LEARNED if n in models.available_drafters]
    try:
        prose_source, split = heldout_split(Path(args.target or DEMO_DIR), args.prose_source, args.docs_dir,
                                            "measure")
    except PythonDocsMissing as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    blocks = heldout_blocks(models.tokenizer, split, 128, args.blocks)
    started = time.monotonic()
    agree = agreement(models, names, blocks, args.stride)
    print(f"[measure] agreement in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    prompts = (prompt_file(args.prompts) if args.prompts is not None else prompt_set(models.tokenizer, split))
    repetition = folder_repetition(Path(args.target).parent) if args.target else models.suggested_repetition
    report = {"agreement": agree, "anchors": sum(len(range(16, b.numel() - 1, args.stride)) for b in blocks),
              "speed": speed(models, names, prompts, args.repeats, args.max_new_tokens, repetition),
              "repetition": dataclasses.asdict(repetition),
              "prompts": len(prompts), "repeats": args.repeats, "max_new_tokens": args.max_new_tokens,
              "heads": head_summary(models), "prose_source": prose_source,
              "hardware": f"{torch.get_num_threads()} CPU thread, float32"}
    print(json.dumps(report, indent=2))
    if not args.no_card:
        upsert_section(args.card, render_section(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
