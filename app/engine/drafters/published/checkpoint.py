"""What every published drafter checkpoint shares: where it is, its files, what it declares, how it is run.

A checkpoint is a folder (config.json and weights) or a hub id, fetched into the local cache with the same
progress as a model download (`loading.fetch_from_hub`'s reporting). Weights are read from safetensors or from
a torch pickle (`pytorch_model.bin`, `medusa_lm_head.pt`), the latter with `weights_only=True` so that loading a
file runs no code from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from app.engine.download import download_snapshot
from app.engine.drafters.heads.common import HeadDrafter, TargetParts, weight_of
from app.engine.drafters.heads.format import HeadSpec
from app.engine.drafters.published.formats import CheckpointInfo
from app.engine.errors import DrafterCheckpointError
from app.engine.paths import looks_like_path

if TYPE_CHECKING:
    from app.engine.drafters.registry import Models

CONFIG_FILE = "config.json"
# What a drafter repo's download takes: configs and weights in either format; nothing else is needed.
HUB_PATTERNS = ("*.json", "*.safetensors", "*.bin", "*.pt")


@dataclass
class PublishedHead(HeadSpec):
    """A loaded published drafter (a HeadSpec, so it sits among the loaded heads): its weights on the target's
    device, the parts it reads, and what the checkpoint declared; `build` makes a fresh drafter (own state) that
    shares the weights."""

    info: CheckpointInfo
    parts: TargetParts
    drafter: type[HeadDrafter]
    notices: list[str] = field(default_factory=list)  # said once at the next generation

    def build(self, models, options=None) -> HeadDrafter:
        return self.drafter(self.name, self.module, self.parts, self.config)


def fetch_checkpoint(source: str, report=None) -> Path:
    """A local folder for `source`: a folder as it is, a hub id downloaded into the cache with progress."""
    if looks_like_path(source):
        folder = Path(source).expanduser()
        if not folder.is_dir():
            raise DrafterCheckpointError(f"drafter checkpoint folder {source!r} does not exist; check the path.")
        return folder
    return Path(download_snapshot(source, HUB_PATTERNS, report))


def read_config(folder: Path) -> dict:
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise DrafterCheckpointError(f"{str(folder)!r} holds no {CONFIG_FILE}: give the folder or hub id of a "
                                     "published drafter (EAGLE-3, speculators, Medusa).")
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DrafterCheckpointError(f"cannot read {str(path)!r} ({exc}); download the checkpoint again.") from exc
    if not isinstance(config, dict):
        raise DrafterCheckpointError(f"{str(path)!r} is not a JSON object; download the checkpoint again.")
    return config


def read_weights(folder: Path, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The tensors of the first of `names` present in `folder` (safetensors or a torch pickle), on the CPU."""
    for name in names:
        path = folder / name
        if path.is_file():
            try:
                if name.endswith(".safetensors"):
                    from safetensors.torch import load_file

                    return load_file(str(path))
                loaded = torch.load(str(path), map_location="cpu", weights_only=True)
            except Exception as exc:
                raise DrafterCheckpointError(f"cannot read the weights {str(path)!r} ({type(exc).__name__}): the "
                                             "file is damaged or cut off; download it again.") from exc
            if not isinstance(loaded, dict):
                raise DrafterCheckpointError(f"{str(path)!r} holds no state dict; download it again.")
            return {str(key): value for key, value in loaded.items() if isinstance(value, torch.Tensor)}
    raise DrafterCheckpointError(f"{str(folder)!r} holds none of {', '.join(names)}; download the checkpoint "
                                 "again.")


def weight_files(folder: Path, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if (folder / name).is_file()]


def verifier_notice(info: CheckpointInfo, target_name: str) -> list[str]:
    """A notice when the checkpoint names another verifier than the loaded target (folders are compared by their
    last component, so a local copy of the same hub model does not warn)."""
    if not info.verifier:
        return []
    declared, loaded = info.verifier.rstrip("/").split("/")[-1], str(target_name).rstrip("/").split("/")[-1]
    if declared.lower() == loaded.lower():
        return []
    return [f"the {info.drafter} drafter {info.source} was trained for {info.verifier}, not for the loaded target "
            f"{target_name}: it loads (the shapes fit) but may draft poorly."]


def check_loaded(module: nn.Module, weights: dict[str, torch.Tensor], source: str, what: str) -> None:
    """Load `weights` into `module` exactly: a missing, unexpected or misshapen tensor is refused in one line."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong = [f"{name} {tuple(weights[name].shape)} vs {tuple(t.shape)}" for name, t in expected.items()
             if name in weights and weights[name].shape != t.shape]
    if missing or unexpected or wrong:
        detail = "; ".join(filter(None, [f"missing {missing[:4]}" if missing else "",
                                         f"unexpected {unexpected[:4]}" if unexpected else "",
                                         f"wrong shapes {wrong[:4]}" if wrong else ""]))
        raise DrafterCheckpointError(f"the {what} weights in {source!r} do not match its config.json ({detail}); "
                                     "download the checkpoint again or check its format.")
    module.load_state_dict({name: weights[name] for name in expected})


def place(module: nn.Module, models: Models) -> None:
    """Move the module, in place, to the target's device and dtype, frozen."""
    reference = weight_of(models.target.get_input_embeddings())
    module.to(device=reference.device, dtype=reference.dtype).eval().requires_grad_(False)
