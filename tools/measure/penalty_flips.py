#!/usr/bin/env python3
"""How often a repetition penalty moves the target's greedy choice, and how each drafter follows it there.

    python -m tools.measure.penalty_flips --prompts PROMPTS.json --drafters eagle,mtp,draft-model
    python -m tools.measure.penalty_flips --heads DIR --penalty 1.2 --count 10

The target writes each prompt's greedy continuation under the penalty (Hugging
Face's `generate`). At every written position t the target's choice g_t is the
argmax of its penalised logits; the position is a *flip* where that is not the
argmax of its plain logits. Each drafter then drafts one token after x_0 .. x_t
(teacher-forced on the target's text, with the target's features where it reads
them), under the same penalty as the engine applies it, and scores where it
drafted g_t: the first draft position's acceptance under greedy verification,
on flips and elsewhere. A drafter trained on the plain distribution follows
the flips poorly; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from app.engine.core.sampling import TokenSampler
from app.engine.drafters import build_drafter
from app.engine.loading import load_models
from app.engine.settings import DrafterOptions, RepetitionSettings
from tools.measure.drafters import prompt_file
from tools.options import add_threads

HELDOUT = Path(__file__).resolve().parents[1] / "train" / "demo_training" / "heldout_prompts.json"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", help="target folder (default: the demo family)")
    parser.add_argument("--draft", help="draft model folder (with --target)")
    parser.add_argument("--heads", help="heads folder (default: the family's)")
    parser.add_argument("--drafters", default="eagle,mtp,draft-model")
    parser.add_argument("--prompts", type=Path, default=HELDOUT)
    parser.add_argument("--count", type=int, default=None, help="the first N prompts only")
    parser.add_argument("--penalty", type=float, default=1.2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    add_threads(parser)
    return parser.parse_args(argv)


def followed(drafter, prefix: torch.Tensor, features, sampler: TokenSampler, choice: int) -> bool:
    draft = drafter.propose(prefix, 1, sampler, features)
    return draft is not None and int(draft.tokens[0]) == choice


def measure(models, names: list[str], prompts: list[str], penalty: float, max_new: int) -> dict:
    repetition = RepetitionSettings(penalty=penalty)
    drafters = {name: build_drafter(name, models, DrafterOptions()) for name in names}
    hits = {name: {"flips": 0, "elsewhere": 0} for name in names}  # first drafts accepted
    positions = {"flips": 0, "elsewhere": 0}
    for prompt in prompts:
        ids = models.tokenizer(prompt, return_tensors="pt").input_ids
        text = models.target.generate(ids, max_new_tokens=max_new, do_sample=False, repetition_penalty=penalty,
                                      attention_mask=torch.ones_like(ids))[0]  # (N,)
        with torch.inference_mode():
            out = models.target(input_ids=text[None], output_hidden_states=True)
        for t in range(ids.shape[1] - 1, text.numel() - 1):
            choice = int(text[t + 1])
            where = "elsewhere" if int(out.logits[0, t].argmax()) == choice else "flips"
            positions[where] += 1
            prefix = text[: t + 1]
            sampler = TokenSampler(None, torch.Generator(), repetition, prefix)
            for name, drafter in drafters.items():
                features = [out.hidden_states[layer][0, :t] for layer in drafter.feature_layers] or None
                hits[name][where] += followed(drafter, prefix, features, sampler, choice)
    total = sum(positions.values())
    return {"penalty": penalty, "prompts": len(prompts), "positions": total, "flips": positions["flips"],
            "flip_share": share(positions["flips"], total),
            "first_draft_accepted": {name: {**{where: share(h[where], positions[where]) for where in positions},
                                            "all": share(sum(h.values()), total)} for name, h in hits.items()}}


def share(part: int, whole: int) -> float:
    return round(part / max(1, whole), 3)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    models = load_models(args.target, args.draft, device="cpu", dtype="float32", heads=args.heads)
    names = [n.strip() for n in args.drafters.split(",") if n.strip() in models.available_drafters]
    prompts = prompt_file(args.prompts)[: args.count]
    print(json.dumps(measure(models, names, prompts, args.penalty, args.max_new_tokens), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
