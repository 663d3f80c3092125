"""The target's own text: continuations of corpus prefixes, for distilling the drafters on what they will draft.

A drafter is scored on the target's continuations, not on the corpus, and the two differ (the target's text is
more generic and more repetitive). Training a drafter on text the target wrote (Medusa-2's self-distillation,
DistillSpec's model-generated data) teaches it the target's habits where they show.

A family that suggests a repetition penalty is decoded with it in the window, so its drafters are scored on
text written under the penalty: `penalty` writes the training text the same way (app/engine/core/repetition.py,
Hugging Face's semantics, the prompt counting as context).

Notation: a prompt of P corpus tokens, continued for C tokens; a generated block of the draft's training data
holds two such sequences, block_size = 2 (P + C) tokens.
"""

from __future__ import annotations

from pathlib import Path

import torch

from app.engine.core.repetition import RepetitionSettings, process_rows

from .checkpoint import atomic_torch_save, load_if_exists
from .data import spread_blocks

# Rows per forward of the target: what keeps 2 CPU cores busy, or a GPU.
GENERATION_BATCH = {"cpu": 64, "cuda": 1024}
GREEDY_GRANULARITY = 64  # the greedy share is rounded up to this many rows (see `continuations`)
SAMPLING_TEMPERATURE = 0.8
SEQUENCES_PER_BLOCK = 2
PROMPT_SHARE = 4  # P = (P + C) / 4: a quarter of each sequence is corpus, the rest the target's


def device_of(model) -> torch.device:
    return next(model.parameters()).device


def greedy_rows(count: int) -> int:
    """Prompts continued greedily: the first half, rounded up to `GREEDY_GRANULARITY` rows (the batch the CPU
    has always used, so the data does not depend on the device's batch size)."""
    return min(count, -(-(count // 2) // GREEDY_GRANULARITY) * GREEDY_GRANULARITY)


@torch.no_grad()
def continue_rows(target, tokens: torch.Tensor, length: int, generator: torch.Generator | None,
                  penalty: float = 1.0) -> torch.Tensor:
    """Rows (B, P) on the target's device continued for `length` tokens -> (B, P + length): greedy without a
    generator, else sampled at `SAMPLING_TEMPERATURE`; the logits under repetition penalty `penalty` first."""
    repetition = RepetitionSettings(penalty=penalty)
    step = target(input_ids=tokens, use_cache=True)
    for _ in range(length):
        logits = step.logits[:, -1].float()  # (B, V)
        if repetition.active:  # each row for its own context, the prompt included
            logits = process_rows(logits, tokens.new_empty(0), list(tokens), repetition)
        if generator is None:
            following = logits.argmax(-1, keepdim=True)  # (B, 1)
        else:
            probs = torch.softmax(logits / SAMPLING_TEMPERATURE, -1)
            following = torch.multinomial(probs, 1, generator=generator)
        tokens = torch.cat([tokens, following], dim=1)
        step = target(input_ids=following, cache=step.cache, use_cache=True)
    return tokens


def continuations(target, prompts: torch.Tensor, length: int, seed: int, batch: int | None = None,
                  penalty: float = 1.0) -> torch.Tensor:
    """The target's own text after each prompt (P,) on its device: about the first half greedy (`greedy_rows`),
    the rest sampled at T = 0.8 (with a generator on that device: CPU and CUDA draw different samples), both
    under repetition penalty `penalty`.

    A plain cached loop: HF `generate` costs several times more per step at this model size. Returned on the CPU.
    """
    device = device_of(target)
    batch = batch or GENERATION_BATCH.get(device.type, GENERATION_BATCH["cpu"])
    generator = torch.Generator(device=device).manual_seed(seed)
    split = greedy_rows(len(prompts))
    out = []
    for part, sampler in ((prompts[:split], None), (prompts[split:], generator)):
        for start in range(0, len(part), batch):
            out.append(continue_rows(target, part[start:start + batch].to(device), length, sampler, penalty).cpu())
    return torch.cat(out)


def generated_blocks(target, corpus: torch.Tensor, count: int, seed: int, path: Path,
                     chunk_blocks: int = GREEDY_GRANULARITY, penalty: float = 1.0) -> torch.Tensor:
    """`count` blocks (count, T) of the target's continuations of corpus prefixes, T = corpus.shape[1].

    The prompts are the starts of blocks spread over the whole corpus (`corpus` (S, T)). Written by chunks of
    `chunk_blocks` blocks, each half greedy and half sampled (under repetition penalty `penalty`), and saved to
    `path` after each chunk: a run that is killed resumes at its last finished chunk, and the result does not
    depend on where it stopped.
    """
    block_size = corpus.shape[1]
    sequence = block_size // SEQUENCES_PER_BLOCK
    prompt = sequence // PROMPT_SHARE
    prompts = spread_blocks(corpus, count * SEQUENCES_PER_BLOCK)[:, :prompt]  # (2 count, P)
    prompts = prompts[: len(prompts) - len(prompts) % SEQUENCES_PER_BLOCK]
    saved = load_if_exists(path)
    done: list[torch.Tensor] = [] if saved is None else list(saved["chunks"])
    rows = chunk_blocks * SEQUENCES_PER_BLOCK
    for index in range(len(done), -(-len(prompts) // rows)):
        written = continuations(target, prompts[index * rows:(index + 1) * rows], sequence - prompt,
                                seed + index, penalty=penalty)  # (rows, P + C)
        done.append(written.reshape(-1, block_size))
        atomic_torch_save({"chunks": done}, path)
    return torch.cat(done)
