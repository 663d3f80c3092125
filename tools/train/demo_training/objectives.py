"""Loss functions: LayerSkip-style early-exit LM loss, sequence-level unlikelihood, draft distillation.

Unlikelihood (Welleck et al. 2019, "Neural text generation with unlikelihood training", sequence level): the
model continues prompts x_{<=P} greedily to x_{P+1..P+L}; every continuation token that belongs to a repeat of an
n-gram earlier in its continuation is a negative candidate c_t = x_t, and the loss -sum_t log(1 - p(c_t | x_<t))
pushes its probability down. Small models loop under greedy decoding; this trains the loops away where they
form, instead of penalising every repeat at decoding time (which breaks code: closing brackets repeat).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

from .config import RunConfig, Unlikelihood
from .generation import continue_rows


def early_exit_weights(num_layers: int, total_weight: float) -> dict[int, float]:
    """Weight of the exit after each layer 1..L-1, proportional to depth."""
    depths = range(1, num_layers)
    norm = sum(depths)
    return {depth: total_weight * depth / norm for depth in depths}


def exit_logits(model: LlamaForCausalLM, hidden: torch.Tensor) -> torch.Tensor:
    """What a self-speculative drafter computes: final norm + LM head."""
    return model.lm_head(model.model.norm(hidden))


def make_target_loss(config: RunConfig):
    """CE of the full model plus weighted CE of every early exit.

    In transformers 5.x ``hidden_states[d]`` for 0 < d < L is the raw output of
    decoder layer d (the last entry is already normed), which is exactly the
    input a layer-skip drafter feeds to the final norm.
    """
    weights = early_exit_weights(config.target.num_layers, config.early_exit_total_weight)
    stride = config.early_exit_position_stride

    unlikelihood = config.unlikelihood

    def loss_fn(model: LlamaForCausalLM, batch: torch.Tensor, step: int):
        output = model(input_ids=batch, labels=batch, output_hidden_states=True)
        offset = step % stride  # rotate so every position is covered over steps
        targets = batch[:, 1:][:, offset::stride].reshape(-1)
        loss = output.loss
        for depth, weight in weights.items():
            hidden = output.hidden_states[depth][:, :-1][:, offset::stride]
            logits = exit_logits(model, hidden).flatten(0, 1)
            loss = loss + weight * F.cross_entropy(logits, targets)
        if unlikelihood is not None:
            loss = loss + unlikelihood.weight * unlikelihood_loss(model, batch[:, :unlikelihood.prompt_tokens],
                                                                  unlikelihood)
        return loss, output.loss.item()

    return loss_fn


def repeated_ngrams(tokens: torch.Tensor, n: int) -> torch.Tensor:
    """(B, L) ids -> (B, L) bool: the tokens of every occurrence of an n-gram that occurred earlier in its row."""
    mask = torch.zeros(tokens.shape, dtype=torch.bool)
    for row, ids in enumerate(tokens.tolist()):
        seen: set[tuple[int, ...]] = set()
        for start in range(len(ids) - n + 1):
            gram = tuple(ids[start:start + n])
            if gram in seen:
                mask[row, start:start + n] = True
            seen.add(gram)
    return mask


def unlikelihood_loss(model: LlamaForCausalLM, prompts: torch.Tensor, settings: Unlikelihood) -> torch.Tensor:
    """The unlikelihood of the model's own greedy continuations of prompts (B, P), on policy."""
    tokens = continue_rows(model, prompts, settings.new_tokens, None)  # (B, P + L), no gradient
    return unlikelihood_of_repeats(model, tokens, prompts.shape[1], settings.ngram)


def unlikelihood_of_repeats(model: LlamaForCausalLM, tokens: torch.Tensor, prompt_tokens: int,
                            ngram: int) -> torch.Tensor:
    """-sum over the repeated tokens c_t of the continuations tokens[:, P:] of log(1 - p(c_t | x_<t)), divided by
    the number of continuation tokens; tokens (B, P + L)."""
    written = tokens[:, prompt_tokens:]  # (B, L)
    negatives = repeated_ngrams(written, ngram).to(tokens.device)  # (B, L)
    if not negatives.any():
        return tokens.new_zeros((), dtype=torch.float32)
    logits = model(input_ids=tokens).logits[:, prompt_tokens - 1:-1].float()  # (B, L, V): predict `written`
    p = torch.softmax(logits, -1).gather(-1, written.unsqueeze(-1)).squeeze(-1)  # (B, L)
    return -torch.log1p(-p.clamp(max=1 - 1e-5))[negatives].sum() / written.numel()


def make_distill_loss(teacher: LlamaForCausalLM, config: RunConfig):
    """Temperature-softened KL to the teacher plus a little hard-label CE."""
    temperature = config.distill_temperature
    kl_weight = config.distill_kl_weight

    def loss_fn(model: LlamaForCausalLM, batch: torch.Tensor, step: int):
        with torch.no_grad():
            teacher_logits = teacher(input_ids=batch).logits[:, :-1].flatten(0, 1).float()
        # float32 softmaxes under bfloat16 autocast: the KL of near-equal
        # distributions is a small difference of large numbers.
        student_logits = model(input_ids=batch).logits[:, :-1].flatten(0, 1).float()
        kl = F.kl_div(
            F.log_softmax(student_logits / temperature, dim=-1),
            F.log_softmax(teacher_logits / temperature, dim=-1),
            log_target=True,
            reduction="batchmean",
        ) * temperature**2  # keeps gradient scale independent of temperature
        ce = F.cross_entropy(student_logits, batch[:, 1:].reshape(-1))
        return kl_weight * kl + (1 - kl_weight) * ce, ce.item()

    return loss_fn
