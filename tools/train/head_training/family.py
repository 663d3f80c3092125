"""Train one family on the cached data and export it in the heads format (heads/format.py, FORMAT.md).

On a GPU the head trains there (float32 master weights and optimizer state, the forward and backward under
bfloat16 autocast with ``--dtype bfloat16``, the losses' softmax in float32) and comes back to the CPU in
float32 for the export, which writes the same fp16 files whatever the device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from pathlib import Path

import torch

from app.engine.drafters.heads import HeadConfig, TargetParts, TargetShape, build_module, default_config, save_head
from app.engine.drafters.heads.format import WEIGHTS_FILE, load_weights, read_config

from ..demo_training.checkpoint import atomic_replace_folder, atomic_write_text
from ..demo_training.config import StageSchedule
from ..demo_training.loop import train_stage
from ..demo_training.runtime import CPU, Runtime
from .data import batch_of
from .lineage import lineage_record, lineage_steps
from .losses import LOSSES
from .run import HeadsRun


def train_family(family: str, target, data: dict, run: HeadsRun, shape: TargetShape, target_name: str,
                 checksum: str, cache: Path, checkpoint_seconds: float,
                 runtime: Runtime = CPU, init: Path | None = None) -> tuple[HeadConfig, torch.nn.Module]:
    """Train `family` on `data` (on `runtime.device`, as the target is) and return its config and module (CPU,
    float32). The checkpoint is keyed by the run, not the runtime: a run resumes on either device.

    With `init` (a head folder of this family and architecture, whose checksum `run.head_init` records) the
    head continues from those weights, its batches drawn in another order than a fresh run's."""
    config = default_config(family, shape, target_name, **run.arch[family])
    torch.manual_seed(run.seed)
    module = build_module(config).float()  # initialised on the CPU: the same weights on every device
    continued = None if init is None else start_from(module, config, init)
    parts = TargetParts.of(target)
    generator = torch.Generator().manual_seed(run.seed + 1)  # CPU: the rows scored are the same on every device
    loss_of = LOSSES[family]

    def loss_fn(model, indices, step):
        generator.manual_seed(run.seed * 100_003 + step)  # row choice depends only on (seed, step): resumable
        with on_default_device(runtime.device):
            loss = loss_of(model, parts, batch_of(data, indices, config.feature_layers, run.hard_label_weight), run,
                             generator)
        return loss, loss.item()

    sequences = torch.arange(len(data["tokens"]))[:, None]  # train_stage batches rows of this index table
    stage = StageSchedule(**run.schedules[family])
    order_seed = run.seed if continued is None else run.seed + 1
    result = train_stage(family, module, loss_fn, sequences, stage, order_seed,
                         cache / f"{family}-{run.fingerprint()}.ckpt", checkpoint_seconds, runtime)
    training = {"seed": run.seed, "run": run.name, "steps": result.steps, "seconds": round(result.seconds, 1),
                "final_loss": round(result.final_loss, 4), "batch_size": stage.batch_size,
                "sequences": len(data["tokens"]), "sequence_length": run.seq_len,
                "data": f"stdlib code + {PROSE_NAMES[run.prose_source]} (tools/train/demo_training corpus) and target "
                        f"continuations{penalty_text(run.generation_penalty)}; labels: target top-8 probabilities"
                        f"{penalty_text(run.label_penalty, 'taken')}{hard_label_text(run.hard_label_weight)}",
                "prose_source": run.prose_source, "generation_penalty": run.generation_penalty,
                "hard_label_weight": run.hard_label_weight, "label_penalty": run.label_penalty,
                "hardware": runtime.describe(), "precision": PRECISION[runtime.dtype],
                "target_checksum": checksum}
    if continued is not None:
        training["continues"] = continued
    return dataclasses.replace(config, training=training), module


class HeadInitMismatch(ValueError):
    """The head a run would continue from is not of the run's family and architecture."""


def head_checksum(folder: Path) -> str:
    """Short hash of a head folder's weights: the key of a run that continues from them."""
    return hashlib.sha256((Path(folder) / WEIGHTS_FILE).read_bytes()).hexdigest()[:16]


def start_from(module: torch.nn.Module, config: HeadConfig, folder: Path) -> dict:
    """Load the head in `folder` into `module`; return its lineage record (`lineage.lineage_record`), which the
    exported config keeps as `continues`."""
    trained = load_matching(module, config, folder, "Continue from a head of the same run (--run, "
                            "--intermediate) and target.")
    return lineage_record(trained.training, head_checksum(folder))


def load_matching(module: torch.nn.Module, config: HeadConfig, folder: Path, advice: str) -> HeadConfig:
    """Load the head in `folder` into `module` (built from `config`) once its config matches; return its config."""
    trained = read_config(folder)
    check_same_architecture(config, trained, folder, advice)
    load_weights(module, folder, config.family)
    return trained


def check_same_architecture(config: HeadConfig, other: HeadConfig, folder: Path, advice: str) -> None:
    """Raise HeadInitMismatch unless the head in `folder` (`other`) has `config`'s family, arch, features and
    target."""
    if (other.family, other.arch, other.feature_layers, other.target) != \
            (config.family, config.arch, config.feature_layers, config.target):
        raise HeadInitMismatch(
            f"{folder} holds a {other.family} head with arch {other.arch}, feature layers "
            f"{list(other.feature_layers)}, for {other.target}; expected a {config.family} head with arch "
            f"{config.arch}, feature layers {list(config.feature_layers)}, for {config.target}. {advice}")


def averaged_head(folders: list[Path]) -> tuple[HeadConfig, torch.nn.Module]:
    """The uniform average of the weights of heads of one architecture (a "model soup"), in float32.

    The config is the first head's; its training record keeps the first head's description of the data and adds
    `average_of` (each head's lineage record, `lineage.lineage_record`), the seconds summed and the steps of its
    longest-trained member.
    """
    first = read_config(folders[0])
    modules, configs = [], []
    for folder in folders:
        module = build_module(first).float()
        configs.append(load_matching(module, first, folder, "Average heads of one run's architecture and target."))
        modules.append(module.state_dict())
    average = build_module(first).float()
    average.load_state_dict({name: torch.stack([m[name].float() for m in modules]).mean(0) for name in modules[0]})
    members = [lineage_record(config.training, head_checksum(folder))
               for folder, config in zip(folders, configs, strict=True)]
    training = {**first.training, "average_of": members,
                "seconds": round(sum(float(m.get("seconds", 0.0)) for m in members), 1)}
    training["steps"] = lineage_steps(training)
    for own in ("continues", "final_loss"):  # the first head's, not the average's
        training.pop(own, None)
    return dataclasses.replace(first, training=training), average


def hard_label_text(weight: float) -> str:
    return "" if weight == 0.0 else f", {weight:g} of each moved onto its argmax"


def penalty_text(penalty: float, verb: str = "written") -> str:
    return "" if penalty == 1.0 else f" {verb} under repetition penalty {penalty}"


PRECISION = {"float32": "float32", "bfloat16": "bfloat16 mixed-precision (float32 weights)"}


def on_default_device(device: str):
    """Tensors created without a device inside the families' training forwards (positions, masks) land on the
    training device; on the CPU nothing changes (and nothing is intercepted)."""
    return contextlib.nullcontext() if device == "cpu" else torch.device(device)


PROSE_NAMES = {"pydoc": "language reference", "docs": "Python documentation"}


def export(out: Path, family: str, config: HeadConfig, module: torch.nn.Module) -> None:
    atomic_replace_folder(out / family, lambda tmp: save_head(tmp, config, module))


def write_format_notes(out: Path) -> None:
    from app.engine.drafters.heads import format as head_format

    text = "# Learned drafter heads: on-disk format\n\n" + head_format.__doc__.split("\n", 1)[1].strip() + "\n"
    atomic_write_text(out / "FORMAT.md", text + FORMAT_EXTRA)


FORMAT_EXTRA = """
## Using heads with another target

Train them with `python -m tools.train.heads --target DIR --out HEADS_DIR`, then
start the app with that target and `load_models(target=DIR, heads=HEADS_DIR)`.
Loading checks hidden size, vocabulary size and layer count against the target
and refuses heads that do not fit with a message naming the difference.

## Families

- `medusa`: `heads.K.weight` (H, H), `heads.K.bias` (H,): `x + SiLU(W x + b)` per head, then the target's LM head.
- `mtp`: `depths.D.*`: norms, `proj` (H, 2H), one transformer block, `out_norm`; attention window `arch.window`.
- `eagle`: `fuse` (H, nH), `proj` (H, 2H), one transformer block, `out_norm`; window `arch.window`.
  With `arch.layout` "eagle3" (`tools.train.heads --eagle-layout eagle3`): EAGLE-3's layer instead (`fc`, `layers.0.*`,
  `norm`; app/engine/drafters/published/eagle3.py), reading `hidden_states[2]`, `[L//2]`, `[L-3]`, which
  `tools.train.export_heads` writes as a speculators checkpoint.
- `dflash`: `fuse` (H, nH), `context_norm`, `mask_embedding` (H,), `layers.L.*`, `out_norm`; block `arch.block_size`.

Transformer blocks are pre-norm Llama-style (RMSNorm eps 1e-6, RoPE base 10000 in
the half-split layout, attention without biases, SwiGLU MLP): `attn_norm`, `attn.{q,k,v,o}_proj`, `mlp_norm`,
`mlp.{gate,up,down}_proj`.
"""
