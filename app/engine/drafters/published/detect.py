"""Which published format a drafter checkpoint is in, told from its config.json and file names, and loading it.

    dflash_config or a *DFlash* arch                      -> DFlash, z-lab layout
    speculators_model_type = "eagle3"                     -> EAGLE-3, speculators (vLLM) layout
    draft_vocab_size, eagle_config or an *Eagle3* arch    -> EAGLE-3, SafeAILab / SpecForge layout
    medusa_num_heads                                      -> Medusa, FasterDecoding layout
    num_nextn_predict_layers > 0 (a target's own config)  -> its MTP layer (DeepSeek-V3 / GLM / MiMo)
    mtp_num_hidden_layers > 0 (top level or text_config)  -> its MTP layer (Qwen3-Next / Qwen3.5)
    none of these, weights with fc (H, 2H) + bias and no hidden_norm -> EAGLE-1/2 (SafeAILab)

A checkpoint given for one learned drafter (`--eagle`) must be of that drafter's kind; anything else is refused
in one line that names what is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from app.engine.drafters.published import dflash, eagle1, eagle3, medusa, mtp
from app.engine.drafters.published.checkpoint import (
    PublishedHead,
    fetch_checkpoint,
    read_config,
    read_weights,
    weight_files,
)
from app.engine.drafters.published.formats import READS, checkpoint_option, kind_of
from app.engine.errors import DrafterCheckpointError

if TYPE_CHECKING:
    from app.engine.drafters.registry import Models

LOADERS = {"eagle3": eagle3.load, "medusa": medusa.load, "mtp": mtp.load, "dflash": dflash.load}
DRAFTER_OF = {"eagle3": "eagle", "medusa": "medusa", "eagle1": "eagle", "mtp": "mtp", "dflash": "dflash"}


def detect(config: dict, folder: Path, source: str) -> tuple[str, dict[str, torch.Tensor] | None]:
    """The loader key of a checkpoint ("eagle3", "medusa", "eagle1"), and the weights where they had to be read to
    tell (EAGLE-1/2's config is a plain one-layer Llama's: its keys say what it is), or a one-line refusal naming
    what is read."""
    kind = kind_of(config)
    if kind is not None:
        return kind, None
    if weight_files(folder, eagle3.WEIGHT_NAMES):
        weights = read_weights(folder, eagle3.WEIGHT_NAMES)
        if eagle1.is_eagle1(weights):
            return "eagle1", weights
    known = "; ".join(f"{checkpoint_option(name)}: {', '.join(formats)}" for name, formats in READS.items())
    raise DrafterCheckpointError(f"{source!r} is not a drafter checkpoint this version reads ({known}).")


def load_published(name: str, source: str, models: Models, report=None) -> PublishedHead:
    """The checkpoint `source` (folder or hub id) as the learned drafter `name`, checked against the target."""
    folder: Path = fetch_checkpoint(source, report)
    config = read_config(folder)
    kind, weights = detect(config, folder, source)
    if DRAFTER_OF[kind] != name:
        raise DrafterCheckpointError(f"{source!r} is a {DRAFTER_OF[kind]} checkpoint, given for the {name} drafter; "
                                     f"give it with {checkpoint_option(DRAFTER_OF[kind])}.")
    head = eagle1.load(folder, config, source, models, weights) if kind == "eagle1" else \
        LOADERS[kind](folder, config, source, models)
    for notice in head.notices:
        models.execution.note(notice)
    return head


def load_drafters(models: Models, checkpoints: dict[str, str], report=None) -> dict[str, PublishedHead]:
    """Every checkpoint of {drafter name: folder or hub id}; `report(fraction, message)` as they download."""
    loaded = {}
    for index, (name, source) in enumerate(checkpoints.items()):
        step = (lambda fraction, message, i=index: report((i + fraction) / len(checkpoints), message)) \
            if report else None
        loaded[name] = load_published(name, source, models, step)
    return loaded
