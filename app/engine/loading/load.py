"""Load a target and an optional draft model from a hub id or a local folder.

With no target given, the bundled demo family under assets/models/demo is loaded, as described by its
playground.json. The devices are runtime/devices.py's, the files and their errors hub.py's; when the short
forwards are compiled, loading ends with warm_up.py's compile plan.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.engine.errors import IncompatibleTokenizerError, ModelLoadError
from app.engine.loading.hub import fetch_from_hub, load_causal_lm, load_tokenizer
from app.engine.loading.models import LoadedModels
from app.engine.loading.warm_up import LOADING_SHARE, warm_up
from app.engine.runtime.cached_model import find_layer_list, forward_plan
from app.engine.runtime.devices import resolve_device, resolve_dtype
from app.engine.runtime.execution import resolve_execution, settle_execution
from app.engine.settings import RepetitionSettings

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

DEMO_DIR = Path(__file__).resolve().parents[3] / "assets" / "models" / "demo"


def demo_manifest() -> dict:
    path = DEMO_DIR / "playground.json"
    if not path.is_file():
        raise ModelLoadError(
            "the bundled demo models are missing (assets/models/demo). "
            "Rebuild them with `python -m tools.train.demo_models`, or give a model with --target."
        )
    return json.loads(path.read_text())


def manifest_repetition(manifest: dict) -> RepetitionSettings:
    """The repetition controls a family's playground.json suggests (Hugging Face's names); off where it names none.

    Small models loop under greedy decoding; a family trained for the playground says what keeps its text readable.
    """
    return RepetitionSettings(float(manifest.get("repetition_penalty", 1.0)),
                              int(manifest.get("no_repeat_ngram_size", 0)))


def folder_repetition(family: Path) -> RepetitionSettings:
    """What a family folder's playground.json suggests (off without one): for tools that load a family by path."""
    manifest = Path(family) / "playground.json"
    return manifest_repetition(json.loads(manifest.read_text())) if manifest.is_file() else RepetitionSettings()


def _within(report, start: float, end: float):
    """`report` for one step of a longer job: its 0..1 mapped to start..end of the whole."""
    return lambda fraction, message: report(start + (end - start) * fraction, message)


def check_same_vocabulary(target_tok: PreTrainedTokenizerBase, draft_tok: PreTrainedTokenizerBase, target_name: str,
                          draft_name: str) -> None:
    """Refuse a drafter whose tokens differ from the target's (padding is allowed elsewhere)."""
    target_vocab, draft_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
    if target_vocab == draft_vocab:
        return
    by_id_target = {i: t for t, i in target_vocab.items()}
    by_id_draft = {i: t for t, i in draft_vocab.items()}
    first = next(i for i in range(max(len(by_id_target), len(by_id_draft)) + 1)
                 if by_id_target.get(i) != by_id_draft.get(i))
    raise IncompatibleTokenizerError(
        f"the drafter {draft_name!r} does not share the target's tokenizer: target {target_name!r} has "
        f"{len(target_vocab)} tokens, drafter has {len(draft_vocab)}; first difference at id {first}: "
        f"{by_id_target.get(first)!r} vs {by_id_draft.get(first)!r}. Choose a drafter from the same model family."
    )


# What a folder holds besides its tokenizer: the weights and the model's own configuration.
NOT_TOKENIZER = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.pt", "*.pth", "*.h5",
                 "*.msgpack", "*.onnx", "*.gguf", "config.json", "generation_config.json")


def same_tokenizer_files(target: str, draft: str) -> bool:
    """Both are folders whose files other than the weights and the model's configuration are the same, name for
    name and byte for byte: then they hold one tokenizer, and the draft's need not be loaded to compare."""
    folders = [Path(name).expanduser() for name in (target, draft)]
    if not all(folder.is_dir() for folder in folders):
        return False
    listed = [{path.name: path for path in folder.iterdir()
               if path.is_file() and not any(path.match(pattern) for pattern in NOT_TOKENIZER)} for folder in folders]
    first, second = listed
    return bool(first) and first.keys() == second.keys() and all(
        first[name].read_bytes() == second[name].read_bytes() for name in first)


def load_models(target: str | None = None, draft: str | None = None, device: str = "auto", dtype: str = "auto",
                device_map: str | None = None, progress=None, heads: str | None = None, cache: str | None = None,
                compile: bool | None = None, drafters: dict[str, str] | None = None) -> LoadedModels:
    """Load the target (and draft model); `progress(fraction, message)` is called between steps.

    `heads` is a folder of learned drafters trained for this target (format: app/engine/drafters/heads/format.py);
    the demo target gets the bundled ones under assets/models/demo/heads when they exist. `cache` ("dynamic" or
    "static") and `compile` choose how every model runs (app/engine/runtime/execution.py); None: the device's default.
    Compiling ends the load with `warm_up`, which takes most of it (minutes on a CPU). `drafters` maps a learned
    drafter's name to a published checkpoint (folder or hub id) for this target (app/engine/drafters/published/);
    it replaces a head of that name from `heads`.
    """
    whole = progress or (lambda fraction, message: None)
    exit_layer = None
    suggested = RepetitionSettings()
    if target is None:
        manifest = demo_manifest()
        suggested = manifest_repetition(manifest)
        target = str(DEMO_DIR / manifest["target"])
        draft = draft or str(DEMO_DIR / manifest["draft"])
        exit_layer = manifest.get("layer_skip_exit")
        if heads is None and (DEMO_DIR / "heads").is_dir():
            heads = str(DEMO_DIR / "heads")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    execution = resolve_execution(cache, compile, torch_device)
    report = _within(whole, 0.0, LOADING_SHARE) if execution.compiles else whole  # compiling takes the rest
    # Downloads (when a hub model is not cached yet) take most of the time when there are any.
    target_files = fetch_from_hub(target, _within(report, 0.0, 0.4))
    draft_files = fetch_from_hub(draft, _within(report, 0.4, 0.5)) if draft else None
    report(0.5, f"loading tokenizer of {target}")
    tokenizer = load_tokenizer(target_files)
    report(0.55, f"loading {target}")
    target_model = load_causal_lm(target_files, torch_device, torch_dtype, device_map)
    settle_execution(execution, target_model)
    forward_plan(target_model, execution, "target")  # probes this transformers' forwards (hf_compat.py)
    found = find_layer_list(target_model)
    draft_model = None
    if draft:
        assert draft_files is not None, "fetched above whenever a draft model is named"
        report(0.75, f"loading {draft}")
        if not same_tokenizer_files(target_files, draft_files):  # a family's shared tokenizer is read once
            check_same_vocabulary(tokenizer, load_tokenizer(draft_files), target, draft)
        draft_model = load_causal_lm(draft_files, torch_device, torch_dtype)
        forward_plan(draft_model, execution, "draft model")
    models = LoadedModels(target_model, tokenizer, target, torch_device, torch_dtype, draft=draft_model,
                          draft_name=draft or None, execution=execution, suggested_repetition=suggested,
                          default_exit_layer=exit_layer or max(1, (len(found[2]) if found else 0) // 2))
    if heads:
        from app.engine.drafters.heads import load_heads  # only when heads are asked for

        report(0.9, f"loading learned drafters from {heads}")
        models = replace(models, heads=load_heads(models, Path(heads)))
    if drafters:
        from app.engine.drafters.published.detect import load_drafters  # only when checkpoints are given

        models = replace(models, heads={**models.heads, **load_drafters(models, drafters, _within(report, 0.9, 1.0))})
    if execution.compiles:
        warm_up(models, _within(whole, LOADING_SHARE, 1.0))
    whole(1.0, "ready")
    return models
