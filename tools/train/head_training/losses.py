"""One loss per family: soft cross-entropy against the target's top-k labels, early draft positions weighted most.

Each loss runs its family's own training forward from app/engine/drafters/heads
(the same computation the drafter performs, for every position at once) and
scores the LM-head inputs it yields. Notation as in `data`.

Every tensor is on the batch's device. The positions scored are drawn on the
CPU (the generator is a CPU one, so the choice is the same on every device)
and moved there. Under bfloat16 autocast the logits come out of the LM head
in bfloat16; the softmax and the loss are taken in float32.
"""

from __future__ import annotations

import torch

from app.engine.drafters.heads import dflash, eagle, mtp
from app.engine.drafters.heads.common import TargetParts

from .data import penalised_logits
from .run import HeadsRun

POSITION_DECAY = 0.8  # loss weight of draft position j is POSITION_DECAY**j: early drafts matter most


def soft_ce(logits: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of logits (R, V) against sparse target probabilities (R, k), weighted rows (R,)."""
    log_q = torch.log_softmax(logits.float(), -1).gather(-1, ids)  # (R, k)
    return -((probs * log_q).sum(-1) * weight).sum() / weight.sum().clamp_min(1e-6)


def sampled_rows(count: int, share: float, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    keep = max(1, int(count * share))
    return torch.randperm(count, generator=generator, device="cpu")[:keep].sort().values.to(device)


def head_loss(parts: TargetParts, hidden: torch.Tensor, batch, positions: torch.Tensor, valid: torch.Tensor,
              run: HeadsRun) -> torch.Tensor:
    """Loss of hidden (B, R, H) LM-head inputs labelled by the target at `positions` (R,); `valid` (R,) bool.

    The logits are penalised for each position's context as the labels were (`HeadsRun.label_penalty`).
    """
    tokens, _, label_ids, label_probs = batch
    positions = positions.clamp(max=tokens.shape[1] - 1)
    ids, probs = label_ids[:, positions], label_probs[:, positions]  # (B, R, k)
    logits = penalised_logits(parts.logits(hidden), tokens, positions, run.label_penalty)  # (B, R, V)
    weight = valid.float().expand(hidden.shape[0], -1)  # (B, R)
    return soft_ce(logits.flatten(0, 1), ids.flatten(0, 1), probs.flatten(0, 1), weight.flatten())


def medusa_loss(module, parts, batch, run: HeadsRun, generator) -> torch.Tensor:
    tokens, (final,), _, _ = batch
    T = tokens.shape[1]
    rows = sampled_rows(T - 1, run.loss_rows, generator, tokens.device)  # positions i with at least one label
    hidden = module(final[:, rows])  # (B, R, K, H)
    total = 0.0
    for k in range(module.num_heads):  # head k at i predicts x_{i+k+2}: label at i+k+1
        target_pos = rows + k + 1
        total = total + POSITION_DECAY ** k * head_loss(parts, hidden[:, :, k], batch, target_pos,
                                                        target_pos <= T - 1, run)
    return total


def mtp_loss(module, parts, batch, run: HeadsRun, generator) -> torch.Tensor:
    tokens, (final,), _, _ = batch
    T = tokens.shape[1]
    total = 0.0
    for d, hidden in enumerate(mtp.training_depths(module, parts, tokens, final)):  # h^{d+1} predicts x_{i+d+2}
        rows = sampled_rows(T, run.loss_rows, generator, tokens.device)
        target_pos = rows + d + 1
        total = total + POSITION_DECAY ** d * head_loss(parts, module.depths[d].out_norm(hidden[:, rows]), batch,
                                                        target_pos, target_pos <= T - 1, run)
    return total


def eagle_loss(module, parts, batch, run: HeadsRun, generator) -> torch.Tensor:
    tokens, features, _, _ = batch
    T, total = tokens.shape[1], 0.0
    for s, output in enumerate(eagle.unrolled_outputs(module, parts, tokens, features, run.eagle_unroll)):
        picked = sampled_rows(T - 1, run.loss_rows, generator, tokens.device)
        target_pos = picked + s + 1
        total = total + POSITION_DECAY ** s * head_loss(parts, module.out_norm(output[:, picked]), batch,
                                                        target_pos, target_pos <= T - 1, run)
    return total


def dflash_loss(module, parts, batch, run: HeadsRun, generator) -> torch.Tensor:
    tokens, features, ids, probs = batch
    T, bs = tokens.shape[1], module.block_size
    anchors = (torch.randperm(T - bs, generator=generator, device="cpu")[: run.dflash_anchors] + 1).sort().values
    anchors = anchors.to(tokens.device)  # in 1..T-bs
    hidden = dflash.training_forward(module, parts, tokens, features, anchors)  # (B, A*bs, H)
    # Row j >= 1 of each block predicts x_{a+j}: label at a+j-1. Indexed, not masked: no data-dependent shape
    # (which would stop a GPU until the mask is read back).
    offsets = torch.arange(1, bs, device=tokens.device).repeat(len(anchors))  # (A*(bs-1),) j
    drafts = torch.arange(len(anchors), device=tokens.device).repeat_interleave(bs - 1) * bs + offsets
    weight = POSITION_DECAY ** (offsets - 1).float()
    target_pos = anchors.repeat_interleave(bs - 1) + offsets - 1
    logits = penalised_logits(parts.logits(hidden[:, drafts]), tokens, target_pos, run.label_penalty)  # (B, R, V)
    B = tokens.shape[0]
    return soft_ce(logits.flatten(0, 1), ids[:, target_pos].flatten(0, 1), probs[:, target_pos].flatten(0, 1),
                   weight.repeat(B))


LOSSES = {"medusa": medusa_loss, "mtp": mtp_loss, "eagle": eagle_loss, "dflash": dflash_loss}
