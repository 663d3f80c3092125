"""The published checkpoint formats each learned drafter reads, by name (no torch: the command line's --help and
the window list them before the engine loads)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SPECFORGE = "EAGLE-3 (SafeAILab / SpecForge)"
SPECULATORS = "EAGLE-3 (speculators)"
MEDUSA = "Medusa (FasterDecoding)"
EAGLE1 = "EAGLE-1/2 (SafeAILab)"
DFLASH = "DFlash (z-lab)"
MTP = "MTP layer in the target's checkpoint (DeepSeek-V3 / GLM / MiMo / Qwen3-Next / Qwen3.5)"

# Learned drafter name -> the formats a checkpoint given for it may be in (detect.py tells them apart).
READS: dict[str, tuple[str, ...]] = {"eagle": (SPECFORGE, SPECULATORS, EAGLE1), "medusa": (MEDUSA,), "mtp": (MTP,),
                                     "dflash": (DFLASH,)}


def checkpoint_option(name: str) -> str:
    """The command-line option that gives drafter `name` a checkpoint: --eagle."""
    return f"--{name}"


def checkpoints_from(values: dict[str, str | None]) -> dict[str, str]:
    """{drafter name: folder or hub id} of the checkpoints given (None: not given)."""
    return {name: value for name, value in values.items() if name in READS and value}


@dataclass(frozen=True)
class CheckpointInfo:
    """What a published checkpoint declares, as the window and the command line show it."""

    format: str  # e.g. "EAGLE-3 (SafeAILab / SpecForge)"
    drafter: str  # the drafter it runs as: "eagle", "medusa"
    source: str  # the folder or hub id it came from
    verifier: str = ""  # the target it says it was trained for ("" where it says nothing)
    draft_vocab_size: int = 0  # 0: not known before the target is (a Medusa head's is the target's)
    tap_layers: tuple[int, ...] = ()  # indices into the target's HF hidden_states (0 = embeddings)

    def describe(self) -> str:
        """One line: 'EAGLE-3 (speculators) for meta-llama/Llama-3.1-8B-Instruct, draft vocabulary 32000, taps
        [2, 16, 29]'."""
        parts = [f"{self.format} for {self.verifier}" if self.verifier else f"{self.format}, verifier not declared"]
        if self.draft_vocab_size:
            parts.append(f"draft vocabulary {self.draft_vocab_size}")
        default = "hidden_states[2], [L//2], [L-3] (the default)" if self.drafter == "eagle" else "the final state"
        parts.append(f"taps {list(self.tap_layers)}" if self.tap_layers else f"taps {default}")
        return ", ".join(parts)


def mtp_layer_count(config: dict) -> int:
    """How many MTP layers a target's config.json declares: DeepSeek's `num_nextn_predict_layers`, Qwen3-Next's
    `mtp_num_hidden_layers` (Qwen3.5 nests it under `text_config`)."""
    nested = config.get("text_config")
    text: dict = nested if isinstance(nested, dict) else {}
    return int(config.get("num_nextn_predict_layers") or config.get("mtp_num_hidden_layers")
               or text.get("mtp_num_hidden_layers") or 0)


def kind_of(config: dict) -> str | None:
    """The loader key of a checkpoint's config.json: "eagle3", "medusa", "mtp", "dflash", or None for a format not
    read."""
    architectures = " ".join(str(a) for a in config.get("architectures") or []).lower()
    if "dflash_config" in config or "dflash" in architectures:
        return "dflash"
    if config.get("speculators_model_type") is not None:
        return "eagle3"
    if "medusa_num_heads" in config:
        return "medusa"
    if mtp_layer_count(config) > 0:
        return "mtp"
    if "draft_vocab_size" in config or "eagle_config" in config or "eagle3" in architectures:
        return "eagle3"
    return None


def eagle3_taps(config: dict, num_layers: int | None) -> tuple[int, ...]:
    """HF hidden_states indices an EAGLE-3 checkpoint reads, low first (the serving engines capture them in layer
    order). None declared: h^2, h^{L//2}, h^{L-3} (empty while L is unknown). speculators' ids are the layers
    whose input is taken (vLLM: the same indices); SpecForge's `eagle_config` ids name layer outputs (SGLang
    adds 1)."""
    if config.get("speculators_model_type") is not None:
        ids, outputs = config.get("eagle_aux_hidden_state_layer_ids"), False
    else:
        ids, outputs = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids"), True
    if not ids:
        return () if num_layers is None else (2, num_layers // 2, num_layers - 3)
    return tuple(sorted(int(i) + (1 if outputs else 0) for i in ids))


def dflash_taps(config: dict, num_layers: int | None) -> tuple[int, ...]:
    """HF hidden_states indices a DFlash checkpoint reads, in its fc's order: `dflash_config.target_layer_ids` + 1
    (z-lab's extract_context_feature), or its build_target_layer_ids spread over `num_target_layers` (else the
    target's depth) when none are declared (empty while that depth is unknown)."""
    ids = (config.get("dflash_config") or {}).get("target_layer_ids")
    if not ids:
        depth, layers = config.get("num_target_layers") or num_layers, int(config.get("num_hidden_layers") or 1)
        if not depth:
            return ()
        span = int(depth) - 4  # from layer 1 to layer L-3
        ids = [int(depth) // 2] if layers == 1 else [round(1 + i * span / (layers - 1)) for i in range(layers)]
    return tuple(int(i) + 1 for i in ids)


def declared(config: dict, source: str, num_layers: int | None = None) -> CheckpointInfo | None:
    """What a config.json declares (None: not a format read); taps need the target's depth where defaulted."""
    kind = kind_of(config)
    if kind == "dflash":
        verifier = str(config.get("base_model_name_or_path") or "")
        return CheckpointInfo(DFLASH, "dflash", source, verifier, 0, dflash_taps(config, num_layers))
    if kind == "mtp":
        return CheckpointInfo(MTP, "mtp", source, "", 0, () if num_layers is None else (num_layers,))
    if kind == "medusa":
        verifier = str(config.get("base_model_name_or_path") or "")
        return CheckpointInfo(MEDUSA, "medusa", source, verifier, 0, () if num_layers is None else (num_layers,))
    if kind != "eagle3":
        return None
    if config.get("speculators_model_type") is not None:
        spec = config.get("speculators_config") or {}
        verifier, label = str((spec.get("verifier") or {}).get("name_or_path") or ""), SPECULATORS
        layer = config.get("transformer_layer_config") or {}
    else:
        verifier, label, layer = str(config.get("base_model_name_or_path") or ""), SPECFORGE, config
    draft_vocab = config.get("draft_vocab_size") or layer.get("vocab_size") or 0
    return CheckpointInfo(label, "eagle", source, verifier, int(draft_vocab), eagle3_taps(config, num_layers))


def describe_folder(source: str) -> str:
    """One line on what a checkpoint folder holds, read from its config.json alone (for the window, before
    loading); a hub id is described once it is downloaded."""
    path = Path(source).expanduser() / "config.json"
    if not path.is_file():
        return "a hub id: its format is detected when it loads" if "/" in source and not Path(source).exists() \
            else "no config.json here: not a drafter checkpoint"
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return "config.json cannot be read"
    info = declared(config, source) if isinstance(config, dict) else None
    return info.describe() if info else "not a format read here"
