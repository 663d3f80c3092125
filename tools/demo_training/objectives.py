"""Loss functions: LayerSkip-style early-exit LM loss and draft distillation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

from .config import RunConfig


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

    def loss_fn(model: LlamaForCausalLM, batch: torch.Tensor, step: int):
        output = model(input_ids=batch, labels=batch, output_hidden_states=True)
        offset = step % stride  # rotate so every position is covered over steps
        targets = batch[:, 1:][:, offset::stride].reshape(-1)
        loss = output.loss
        for depth, weight in weights.items():
            hidden = output.hidden_states[depth][:, :-1][:, offset::stride]
            logits = exit_logits(model, hidden).flatten(0, 1)
            loss = loss + weight * F.cross_entropy(logits, targets)
        return loss, output.loss.item()

    return loss_fn


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
