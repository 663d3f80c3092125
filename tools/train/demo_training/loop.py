"""A resumable, deterministic training loop shared by the target and the draft.

The batch of each step is a pure function of (step, seed) and the model has
no dropout, so a run that is killed and resumed from its last checkpoint
continues exactly as if it had never stopped.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .checkpoint import atomic_torch_save, load_if_exists
from .config import StageSchedule
from .data import batch_at_step
from .progress import progress_bar
from .runtime import CPU, Runtime

# loss_fn(model, batch, step) -> (loss to optimise, value to display)
LossFunction = Callable[[torch.nn.Module, torch.Tensor, int], tuple[torch.Tensor, float]]


@dataclasses.dataclass
class StageResult:
    steps: int
    seconds: float
    tokens: int
    final_loss: float


def warmup_cosine(schedule: StageSchedule) -> Callable[[int], float]:
    """LR multiplier: linear warmup, then cosine decay to ``min_lr_ratio``."""

    def multiplier(step: int) -> float:
        if step < schedule.warmup_steps:
            return (step + 1) / schedule.warmup_steps
        progress = (step - schedule.warmup_steps) / max(1, schedule.steps - schedule.warmup_steps)
        cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return schedule.min_lr_ratio + (1 - schedule.min_lr_ratio) * cosine

    return multiplier


def make_optimizer(model: torch.nn.Module, schedule: StageSchedule) -> torch.optim.AdamW:
    """AdamW; norms (1-D weights) are excluded from weight decay."""
    matrices = [p for p in model.parameters() if p.ndim >= 2]
    vectors = [p for p in model.parameters() if p.ndim < 2]
    groups = [
        {"params": matrices, "weight_decay": schedule.weight_decay},
        {"params": vectors, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=schedule.peak_lr, betas=(0.9, 0.95), eps=1e-8)


def smoothed(previous: float | None, value: float, factor: float = 0.95) -> float:
    return value if previous is None else factor * previous + (1 - factor) * value


def train_stage(
    name: str,
    model: torch.nn.Module,
    loss_fn: LossFunction,
    blocks: torch.Tensor,
    schedule: StageSchedule,
    seed: int,
    checkpoint_path: Path,
    checkpoint_seconds: float,
    runtime: Runtime = CPU,
) -> StageResult:
    """Train ``model`` in place, resuming from ``checkpoint_path`` if present.

    The model trains on ``runtime.device`` (float32 weights and optimizer
    state, the forward under autocast when ``runtime.dtype`` is bfloat16) and
    is returned on the CPU. Checkpoints load on any device, so a run started
    on one machine can resume on another.
    """
    model.to(runtime.device)
    optimizer = make_optimizer(model, schedule)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(schedule))
    state = {"step": 0, "seconds": 0.0, "loss": None}
    saved = load_if_exists(checkpoint_path)  # always mapped to the CPU
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        state = saved["state"]

    def save() -> None:
        atomic_torch_save(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "state": dict(state)},
            checkpoint_path,
        )

    model.train()
    bar = progress_bar(schedule.steps, state["step"], name)
    started = last_save = time.monotonic()
    seconds_before = state["seconds"]
    for step in range(state["step"], schedule.steps):
        batch = batch_at_step(blocks, step, schedule.batch_size, seed).to(runtime.device)
        with runtime.autocast():
            loss, shown = loss_fn(model, batch, step)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), schedule.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        state["step"] = step + 1
        state["loss"] = smoothed(state["loss"], shown)
        state["seconds"] = seconds_before + time.monotonic() - started
        # refresh=False: the bar redraws at its own interval (one line per
        # step would flood a nohup log).
        bar.set_postfix_str(f"loss {state['loss']:.3f} lr {scheduler.get_last_lr()[0]:.2e}", refresh=False)
        bar.update(1)
        if time.monotonic() - last_save >= checkpoint_seconds:
            save()
            last_save = time.monotonic()
    bar.close()
    if saved is None or saved["state"]["step"] < schedule.steps:
        save()
    model.eval().to("cpu")
    tokens = schedule.steps * schedule.batch_size * blocks.shape[1]
    return StageResult(schedule.steps, state["seconds"], tokens, state["loss"] or float("nan"))
