"""Held-out figures of the demo models, computed from the exported folders.

Agreement is teacher-forced top-1 agreement with the target: on held-out text,
the share of positions where a drafter's argmax equals the target's argmax.
For greedy speculative decoding it is the per-token acceptance rate.
"""

from __future__ import annotations

import ast
import math
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from .corpus import CorpusSplit
from .data import pack_blocks, spread_blocks, token_stream
from .models import parameter_count
from .objectives import exit_logits

# Prompts end before the newline on purpose: byte-level BPE merges a newline
# with the next line's indentation, so a prompt ending in a bare "\n" puts
# the model off-distribution (it then tends to start an unindented line).
CODE_PROMPTS = (
    "def fibonacci(n):",
    "import os\n\n\ndef read_lines(path):",
    "class Stack:\n    def __init__(self):",
)
# Longest draft considered when ranking early exits (see exit_plans).
MAX_DRAFT_LENGTH = 8
EVAL_BATCH = 8


def load_model(folder: Path):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def heldout_blocks(tokenizer, split: CorpusSplit, block_size: int, limit: int) -> dict[str, torch.Tensor]:
    backend = tokenizer.backend_tokenizer
    return {
        "code": spread_blocks(pack_blocks(token_stream(backend, split.heldout_code), block_size), limit),
        "prose": spread_blocks(pack_blocks(token_stream(backend, split.heldout_prose), block_size), limit),
    }


class Tally:
    """Running sums of loss and argmax agreement for one model or exit."""

    def __init__(self):
        self.loss_sum, self.agree, self.count = 0.0, 0, 0

    def add(self, logits: torch.Tensor, labels: torch.Tensor, reference: torch.Tensor) -> None:
        self.loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        self.agree += (logits.argmax(-1) == reference).sum().item()
        self.count += labels.numel()

    def summary(self) -> dict:
        loss = self.loss_sum / max(1, self.count)
        return {"loss": round(loss, 4), "perplexity": round(math.exp(loss), 2),
                "agreement": round(self.agree / max(1, self.count), 4), "tokens": self.count}


@torch.no_grad()
def domain_metrics(target, draft, blocks: torch.Tensor) -> dict:
    """Loss/perplexity and agreement with the target for target, draft, exits."""
    depths = range(1, target.config.num_hidden_layers)
    tallies = {"target": Tally(), "draft": Tally(), **{f"exit_{d}": Tally() for d in depths}}
    for batch in blocks.split(EVAL_BATCH):
        labels = batch[:, 1:].reshape(-1)
        output = target(input_ids=batch, output_hidden_states=True)
        target_logits = output.logits[:, :-1].flatten(0, 1)
        reference = target_logits.argmax(-1)
        tallies["target"].add(target_logits, labels, reference)
        tallies["draft"].add(draft(input_ids=batch).logits[:, :-1].flatten(0, 1), labels, reference)
        for depth in depths:
            logits = exit_logits(target, output.hidden_states[depth][:, :-1]).flatten(0, 1)
            tallies[f"exit_{depth}"].add(logits, labels, reference)
    return {name: tally.summary() for name, tally in tallies.items()}


def lm_head_in_layers(config) -> float:
    """Per-token multiply-adds of the LM head, in units of one decoder layer.

    At these sizes the head is as costly as a few layers, so a draft through
    E of L layers costs more than E/L of a full pass.
    """
    hidden, kv = config.hidden_size, config.num_key_value_heads * config.head_dim
    layer = hidden * (2 * hidden + 2 * kv) + 3 * hidden * config.intermediate_size
    return config.vocab_size * hidden / layer


def exit_cost(depth: int, config) -> float:
    """Cost of one draft step through ``depth`` layers, relative to a full pass."""
    head = lm_head_in_layers(config)
    return (depth + head) / (config.num_hidden_layers + head)


def expected_speedup(agreement: float, cost: float, draft_length: int) -> float:
    """Idealised greedy speculative speed-up, in units of full target passes.

    Tokens per round (accepted drafts + the target's own token) divided by the
    cost of a round (draft_length draft steps + one verification pass).
    """
    if agreement >= 1.0:
        tokens = draft_length + 1
    else:
        tokens = (1 - agreement ** (draft_length + 1)) / (1 - agreement)
    return tokens / (draft_length * cost + 1)


def exit_plans(code_metrics: dict, config) -> dict[int, dict]:
    """Best draft length and idealised speed-up of every early exit."""
    plans = {}
    for depth in range(1, config.num_hidden_layers):
        agreement, cost = code_metrics[f"exit_{depth}"]["agreement"], exit_cost(depth, config)
        speedup, length = max((expected_speedup(agreement, cost, k), k)
                              for k in range(1, MAX_DRAFT_LENGTH + 1))
        plans[depth] = {"cost": round(cost, 3), "draft_length": length, "speedup": round(speedup, 3)}
    return plans


def recommend_exit(plans: dict[int, dict]) -> int:
    """The exit depth with the best idealised speed-up on held-out code."""
    return max(plans, key=lambda depth: plans[depth]["speedup"])


BRACKETS = {"(": ")", "[": "]", "{": "}"}


def closing(text: str) -> str:
    """What closes the string and the brackets still open at the end of `text` ("" when none is)."""
    closers: list[str] = []
    quote, i = "", 0
    while i < len(text):
        if quote:  # inside a string: find its end
            if text[i] == "\\":
                i += 2
            elif text.startswith(quote, i):
                i, quote = i + len(quote), ""
            elif len(quote) == 1 and text[i] == "\n":  # an unterminated one-line string ends with its line
                i, quote = i + 1, ""
            else:
                i += 1
            continue
        if text[i] == "#":
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        opener = text[i:i + 3] if text.startswith(('"""', "'''"), i) else text[i]
        if opener in ('"""', "'''", '"', "'"):
            quote = opener
            i += len(opener)
            continue
        if text[i] in BRACKETS:
            closers.append(BRACKETS[text[i]])
        elif closers and text[i] == closers[-1]:
            closers.pop()
        i += 1
    return quote + "".join(reversed(closers))


def valid_python_lines(text: str) -> int:
    """Longest prefix of lines that parses once what the cut left open is closed.

    A completion cut mid-block ("def f():" then nothing), mid-docstring or mid-call is still plausible: the
    open string and brackets are closed (`closing`), and a trailing ``pass`` at the next indentation is tried
    as well.
    """
    lines = text.split("\n")
    for count in range(len(lines), 0, -1):
        candidate = "\n".join(lines[:count])
        indent = len(lines[count - 1]) - len(lines[count - 1].lstrip())
        close = closing(candidate)
        for suffix in (close, close + "\n" + " " * (indent + 4) + "pass"):
            try:
                ast.parse(candidate + suffix)
                return count
            except SyntaxError:
                continue
    return 0


@torch.no_grad()
def greedy_samples(target, tokenizer, new_tokens: int) -> list[dict]:
    samples = []
    for prompt in CODE_PROMPTS:
        inputs = tokenizer(prompt, return_tensors="pt")
        output = target.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
        completion = tokenizer.decode(output[0, inputs.input_ids.shape[1]:], skip_special_tokens=True)
        full = prompt + completion
        samples.append({"prompt": prompt, "completion": completion,
                        "lines": full.count("\n") + 1, "valid_lines": valid_python_lines(full)})
    return samples


def load_seconds(folder: Path, repeats: int = 3) -> float:
    """Median wall time of ``from_pretrained`` (after a warm-up load)."""
    load_model(folder)
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        load_model(folder)
        timings.append(time.perf_counter() - started)
    return round(statistics.median(timings), 3)


def folder_megabytes(folder: Path) -> float:
    """The size of every file under `folder`, through symlinked subfolders too (a family assembled from links)."""
    sizes = (Path(root, name).stat().st_size for root, _, names in os.walk(folder, followlinks=True)
             for name in names)
    return round(sum(sizes) / 1e6, 2)


def model_facts(model, folder: Path) -> dict:
    return {"parameters": parameter_count(model), "megabytes": folder_megabytes(folder),
            "load_seconds": load_seconds(folder), "layers": model.config.num_hidden_layers,
            "hidden_size": model.config.hidden_size, "context_length": model.config.max_position_embeddings}


def evaluate_folder(models_dir: Path, split: CorpusSplit, eval_blocks: int, new_tokens: int) -> dict:
    """All figures of the model card for ``models_dir/{target,draft}``."""
    target = load_model(models_dir / "target")
    draft = load_model(models_dir / "draft")
    tokenizer = AutoTokenizer.from_pretrained(models_dir / "target")
    blocks = heldout_blocks(tokenizer, split, target.config.max_position_embeddings, eval_blocks)
    domains = {name: domain_metrics(target, draft, value) for name, value in blocks.items()}
    # Perplexity per token depends on the tokenizer: text per token makes families with different
    # vocabularies comparable (bits per character = loss / ln 2 / characters per token).
    characters = {name: round(len(tokenizer.decode(value[:, 1:].flatten(), skip_special_tokens=True))
                              / max(1, value[:, 1:].numel()), 3) for name, value in blocks.items()}
    plans = exit_plans(domains["code"], target.config)
    return {
        "domains": domains,
        "characters_per_token": characters,
        "recommended_exit": recommend_exit(plans),
        "exit_plans": plans,
        "lm_head_in_layers": round(lm_head_in_layers(target.config), 2),
        "samples": greedy_samples(target, tokenizer, new_tokens),
        "target": model_facts(target, models_dir / "target"),
        "draft": model_facts(draft, models_dir / "draft"),
        "models_megabytes": round(folder_megabytes(models_dir / "target")
                                  + folder_megabytes(models_dir / "draft"), 2),
    }
