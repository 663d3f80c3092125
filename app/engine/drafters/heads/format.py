"""On-disk format of learned drafter heads, and loading them onto a target.

A heads folder holds one sub-folder per head (any name; the drafter is named
by the config's `family`, one of the learned heads in the drafter registry):

    heads/
      medusa/  config.json  model.safetensors
      mtp/     config.json  model.safetensors
      eagle/   ...
      dflash/  ...

`config.json` (format_version 1):

    family          "medusa" | "mtp" | "eagle" | "dflash"
    target          {"hidden_size", "vocab_size", "num_layers"}: the target the head was trained for
    target_name     informative (folder or hub id of that target)
    feature_layers  indices into the target's HF `hidden_states` (0 = embeddings,
                    num_layers = the final, normed state that feeds the LM head)
    arch            the family's hyper-parameters (constructor arguments)
    training        informative: seed, steps, seconds, data, losses

`model.safetensors` holds only the head's own weights (fp16 in the shipped
files; loaded in the target's dtype). A head never stores the target's
embedding table or LM head: it borrows them from the loaded target, so a head
loads only onto a target with the same hidden size, vocabulary and depth, and
only makes sense with the very target it was trained for.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from app.engine.drafters.heads.common import (
    FORMAT_VERSION,
    HeadConfig,
    HeadDrafter,
    TargetParts,
    TargetShape,
    weight_of,
)
from app.engine.drafters.registry import HEAD_FAMILIES
from app.engine.errors import ModelLoadError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
EAGLE3_LAYOUT = "eagle3"  # arch `layout` of an EAGLE head built as EAGLE-3's layer, exportable to speculators

@dataclass(frozen=True)
class HeadFamily:
    """One family's module (its `MODULE`, `DRAFTER` and `default_layout`), found through the drafter registry."""

    name: str
    module: type[nn.Module]  # the trained part
    drafter: type[HeadDrafter]  # runs it in the pass loop
    default_layout: Callable[[TargetShape], tuple[tuple[int, ...], dict]]  # feature layers, default arch

    @classmethod
    def of(cls, name: str, module_path: str) -> HeadFamily:
        family = importlib.import_module(module_path)
        return cls(name, family.MODULE, family.DRAFTER, family.default_layout)


FAMILIES: dict[str, HeadFamily] = {name: HeadFamily.of(name, path) for name, path in HEAD_FAMILIES.items()}


def default_config(family: str, target: TargetShape, target_name: str = "", **arch) -> HeadConfig:
    """A head configuration for `target`: the family's default feature layers and sizes, `arch` overriding."""
    if family not in FAMILIES:
        raise ValueError(f"unknown head family {family!r}; known: {', '.join(FAMILIES)}")
    layers, defaults = FAMILIES[family].default_layout(target)
    if arch.get("layout") == EAGLE3_LAYOUT:  # EAGLE-3's taps, which a speculators export can name
        from app.engine.drafters.published.eagle3_layer import playground_taps

        layers = playground_taps(target.num_layers)
    return HeadConfig(family, target, layers, {**defaults, **arch}, target_name=target_name)


def build_module(config: HeadConfig) -> nn.Module:
    arch = dict(config.arch)
    if arch.pop("layout", None) == EAGLE3_LAYOUT:  # an EAGLE head with EAGLE-3's layer (published/eagle3.py)
        from app.engine.drafters.published.eagle3_layer import Eagle3Head

        return Eagle3Head.playground(config.target, **arch)
    return FAMILIES[config.family].module(config.target.hidden_size, **arch)


def save_head(folder: Path, config: HeadConfig, module: nn.Module, dtype: torch.dtype = torch.float16) -> None:
    """Write config.json and model.safetensors into `folder` (which must exist)."""
    weights = {name: tensor.detach().to("cpu", dtype).contiguous() for name, tensor in module.state_dict().items()}
    save_file(weights, str(Path(folder) / WEIGHTS_FILE), metadata={"family": config.family})
    (Path(folder) / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=2, sort_keys=True) + "\n")


def read_config(folder: Path) -> HeadConfig:
    path = Path(folder) / CONFIG_FILE
    try:
        config = HeadConfig.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"head folder {str(folder)!r}: cannot read {CONFIG_FILE} ({exc}).") from exc
    if config.family not in FAMILIES:
        raise ModelLoadError(f"head folder {str(folder)!r}: unknown family {config.family!r}; "
                             f"known: {', '.join(FAMILIES)}.")
    if config.format_version > FORMAT_VERSION:
        raise ModelLoadError(f"head folder {str(folder)!r} uses format {config.format_version}; this version "
                             f"reads format {FORMAT_VERSION}. Update the app or retrain the head.")
    return config


def check_fits(config: HeadConfig, target: TargetShape, folder: Path) -> None:
    """Raise a ModelLoadError naming every way the head's target differs from the loaded one."""
    trained = config.target
    wrong = [f"{label} {getattr(trained, field)} (head) vs {getattr(target, field)} (target)"
             for field, label in (("hidden_size", "hidden size"), ("vocab_size", "vocabulary size"),
                                  ("num_layers", "layers"))
             if getattr(trained, field) != getattr(target, field)]
    bad_layers = [i for i in config.feature_layers if not 0 <= i <= target.num_layers]
    if bad_layers:
        wrong.append(f"feature layers {bad_layers} outside 0..{target.num_layers}")
    if wrong:
        raise ModelLoadError(
            f"the {config.family} head in {str(folder)!r} was trained for another target "
            f"({config.target_name or 'unnamed'}): {'; '.join(wrong)}. "
            "Train heads for this target with `python -m tools.train.heads`, or load the target they were trained for.")


def load_weights(module: nn.Module, folder: Path, family: str) -> None:
    try:
        weights = load_file(str(Path(folder) / WEIGHTS_FILE))
    except Exception as exc:
        raise ModelLoadError(f"head folder {str(folder)!r}: cannot read {WEIGHTS_FILE} ({exc}).") from exc
    expected = module.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    mismatched = [f"{name} {tuple(weights[name].shape)} vs {tuple(tensor.shape)}"
                  for name, tensor in expected.items() if name in weights and weights[name].shape != tensor.shape]
    if missing or unexpected or mismatched:
        detail = "; ".join(filter(None, [
            f"missing {missing[:4]}" if missing else "", f"unexpected {unexpected[:4]}" if unexpected else "",
            f"wrong shapes {mismatched[:4]}" if mismatched else ""]))
        raise ModelLoadError(f"the {family} weights in {str(folder)!r} do not match its config.json: {detail}.")
    module.load_state_dict(weights)


@dataclass
class HeadSpec:
    """A loaded head; `build` makes a fresh drafter (own state) that shares the weights."""

    name: str
    config: HeadConfig
    module: nn.Module
    folder: Path

    def build(self, models, options=None):
        return FAMILIES[self.config.family].drafter(self.name, self.module, TargetParts.of(models.target), self.config)


def load_head(folder: Path, target: PreTrainedModel, num_layers: int) -> HeadSpec:
    config = read_config(folder)
    check_fits(config, TargetShape.of(target, num_layers), folder)
    module = build_module(config)
    load_weights(module, folder, config.family)
    reference = weight_of(target.get_input_embeddings())
    module = module.to(device=reference.device, dtype=reference.dtype).eval().requires_grad_(False)
    return HeadSpec(config.family, config, module, Path(folder))


def load_heads(models, root: Path) -> dict[str, HeadSpec]:
    """Every head under `root` (one sub-folder each), checked against `models.target`."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ModelLoadError(f"heads folder {str(root)!r} does not exist. Give a folder with one sub-folder "
                             "per head (config.json + model.safetensors).")
    folders = sorted(p for p in root.iterdir() if (p / CONFIG_FILE).is_file())
    specs = [load_head(folder, models.target, models.num_layers) for folder in folders]
    names = [spec.name for spec in specs]
    duplicated = sorted({name for name in names if names.count(name) > 1})
    if duplicated:
        raise ModelLoadError(f"heads folder {str(root)!r} holds more than one head of family {duplicated}; "
                             "keep one per family.")
    return {spec.name: spec for spec in specs}
