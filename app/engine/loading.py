"""Load a target and an optional draft model from a hub id or a local folder.

Device "auto" picks cuda > mps > cpu; dtype "auto" picks bf16 on CUDA where
supported, fp16 on MPS, fp32 on CPU. With no target given, the bundled demo
family under assets/models/demo is loaded, as described by its playground.json.
When the short forwards are compiled (app/engine/execution.py), loading ends by
compiling every shape a generation will meet (`warm_up`), step by step with
progress, so that the first generation does not wait minutes for them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.engine.cached_model import CachedModel, find_layer_list
from app.engine.drafters.registry import available_drafters
from app.engine.errors import (
    IncompatibleTokenizerError,
    ModelLoadError,
    OutOfMemoryError,
    is_out_of_memory,
    release_memory,
)
from app.engine.execution import Execution, fewest_rows, resolve_execution, row_buckets, settle_execution
from app.engine.paths import looks_like_path
from app.engine.settings import RepetitionSettings

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    # What AutoModelForCausalLM.from_pretrained is declared to return: a PreTrainedModel that can also `generate`.
    from transformers.models.auto.modeling_auto import _BaseModelWithGenerate as CausalLM

DEMO_DIR = Path(__file__).resolve().parents[2] / "assets" / "models" / "demo"
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


@dataclass
class LoadedModels:
    target: CausalLM
    tokenizer: PreTrainedTokenizerBase
    target_name: str
    device: torch.device
    dtype: torch.dtype
    draft: CausalLM | None = None
    draft_name: str | None = None
    default_exit_layer: int = 1
    extras: dict = field(default_factory=dict)  # learned heads (heads/format.py HeadSpec), keyed by drafter name
    execution: Execution = field(default_factory=Execution)  # cache kind and compilation (app/engine/execution.py)
    # The repetition controls the models' family suggests (a front end's starting values; the engine applies only
    # what the settings say).
    suggested_repetition: RepetitionSettings = field(default_factory=RepetitionSettings)

    @property
    def num_layers(self) -> int:
        found = find_layer_list(self.target)
        return len(found[2]) if found else 0

    @property
    def context_length(self) -> int:
        config = self.target.config
        for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return 1 << 20

    @property
    def vocab_size(self) -> int:
        return self.target.get_output_embeddings().weight.shape[0]

    @property
    def available_drafters(self) -> tuple[str, ...]:
        return available_drafters(self)

    @property
    def eos_ids(self) -> frozenset[int]:
        ids = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.target.generation_config, "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(source)
        return frozenset(ids)


def resolve_device(device: str = "auto") -> torch.device:
    if device != "auto":
        try:
            chosen = torch.device(device)
        except RuntimeError as exc:
            raise ModelLoadError(f"unknown device {device!r}: {exc}. Use auto, cpu, cuda, cuda:N or mps.") from exc
        _require_available(chosen)
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _require_available(device: torch.device) -> None:
    """Say so now if the device is missing, instead of a cryptic failure halfway through loading."""
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ModelLoadError("device 'cuda' is not available here (no CUDA GPU or no CUDA build of torch); "
                                 "choose auto or cpu.")
        if device.index is not None and device.index >= count:
            raise ModelLoadError(f"device {str(device)!r} does not exist: this machine has {count} CUDA device(s), "
                                 f"cuda:0 to cuda:{count - 1}.")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ModelLoadError("device 'mps' is not available here (Apple silicon only); choose auto or cpu.")


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so that a clock read afterwards measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype != "auto":
        if dtype not in DTYPES:
            raise ModelLoadError(f"unknown dtype {dtype!r}; use auto, float32, float16 or bfloat16.")
        return DTYPES[dtype]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def demo_manifest() -> dict:
    path = DEMO_DIR / "playground.json"
    if not path.is_file():
        raise ModelLoadError(
            "the bundled demo models are missing (assets/models/demo). "
            "Rebuild them with `python tools/train_demo_models.py`, or give a model with --target."
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


def _load_error(name: str, exc: Exception) -> ModelLoadError:
    if _is_damaged_weights(exc):
        return ModelLoadError(
            f"the weights of {name!r} are damaged or incomplete ({_first_line(exc)}): the file was probably cut off "
            "while downloading or copying. Copy or download it again (for a hub model: delete it from the cache with "
            "`hf cache delete`, then load it again).")
    if looks_like_path(name):
        if not Path(name).expanduser().exists():
            return ModelLoadError(f"model folder {name!r} does not exist. Check the path.")
        return ModelLoadError(
            f"{name!r} is not a loadable model folder ({type(exc).__name__}: {_first_line(exc)}). "
            "It needs config.json, the weights (*.safetensors) and the tokenizer files."
        )
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    hint = ("the hub is switched off (HF_HUB_OFFLINE=1): use a model already in the local cache or a local folder"
            if offline else "check the id and your network, or give a local folder")
    return ModelLoadError(f"could not load {name!r} ({type(exc).__name__}: {_first_line(exc)}); {hint}.")


def _is_damaged_weights(exc: BaseException) -> bool:
    """A safetensors (or torch pickle) file that cannot be parsed: truncated, overwritten, not weights at all."""
    from safetensors import SafetensorError

    current: BaseException | None = exc
    while current is not None:
        if (isinstance(current, SafetensorError) or "deserializ" in str(current)
                or "PytorchStreamReader" in str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else "no details"


# What from_pretrained reads of a hub repo; other weight formats (.bin, .h5, .onnx, gguf ...) are left on the hub.
HUB_FILES = ("*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken", "*.py")


def fetch_from_hub(name: str, report=None) -> str:
    """A local folder for `name`: a folder as it is, a hub id's files in the local cache (downloading what is
    missing, with `report(fraction, message)` as the bytes arrive). A repo without safetensors weights is
    returned as the id, so that from_pretrained fetches its other weight format itself."""
    if looks_like_path(name):
        return name
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(name, allow_patterns=list(HUB_FILES), tqdm_class=_download_progress(name, report))
    except Exception as exc:
        raise _load_error(name, exc) from exc
    return folder if any(Path(folder).glob("*.safetensors")) else name


def _download_progress(name: str, report):
    """A tqdm class for snapshot_download that turns its byte counts into `report(fraction, message)` calls."""
    from tqdm.auto import tqdm

    class DownloadProgress(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs["file"] = _Nowhere()  # counts, never prints
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            super().update(n)
            if report is not None and self.unit == "B" and self.total:
                megabytes = f"{self.n / 2**20:.1f} of {self.total / 2**20:.1f} MB"
                report(min(1.0, self.n / self.total), f"downloading {name}: {megabytes}")

    return DownloadProgress


class _Nowhere:
    """A text stream that drops what is written to it."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    try:
        return AutoTokenizer.from_pretrained(os.path.expanduser(name))
    except Exception as exc:
        raise _load_error(name, exc) from exc


def load_causal_lm(name: str, device: torch.device, dtype: torch.dtype, device_map: str | None = None) -> CausalLM:
    kwargs: dict[str, torch.dtype | str] = {"dtype": dtype}
    if device_map:
        kwargs["device_map"] = device_map
    try:
        model = AutoModelForCausalLM.from_pretrained(os.path.expanduser(name), **kwargs)
        if not device_map:
            # In place (a module's `to` returns the module itself). The ignore: transformers decorates `to` with
            # functools.wraps, whose typeshed stub leaves `self` unbound, so the device is taken for `self`.
            model.to(device)  # type: ignore[arg-type]
    except Exception as exc:
        model = None  # drop the half-loaded weights before releasing memory
        if is_out_of_memory(exc):
            release_memory(exc)
            raise OutOfMemoryError(f"out of memory while loading {name!r}; memory was released. Choose a smaller "
                                   "model, a smaller dtype (bfloat16 / float16) or another device.") from None
        raise _load_error(name, exc) from exc
    assert model is not None, "set in the try block; the except block always raises"
    return model.eval()


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


# The share of a compiling load's progress bar that loading the weights takes; compiling takes the rest.
LOADING_SHARE = 0.2


@dataclass
class WarmUpModel:
    """One model whose short forwards loading compiles: who it is (in the progress messages), its weights and
    layer subset, and the row buckets a generation feeds it (execution.py `row_buckets`)."""

    who: str
    model: CausalLM
    layers: tuple[int, ...] | None
    buckets: list[int]
    role: str = "target"  # as the decoder names its cache (CachedModel's notices), or "<drafter> drafter"

    @property
    def drafter(self) -> bool:
        """A drafter's forwards: one-token steps, a catch-up, tree rounds; else the target's verification."""
        return self.role != "target"

    def step(self, bucket: int) -> str:
        """What compiling `bucket` rows is for: 'one-token step', 'verify 8 rows', 'tree round 4 rows'."""
        if bucket == 1:
            return "one-token step"
        if not self.drafter:
            return f"verify {bucket} rows"
        return "catch-up 2 rows" if bucket == 2 else f"tree round {bucket} rows"


def warm_up_plan(models: LoadedModels) -> list[WarmUpModel]:
    """The shapes a generation meets, per model that runs compiled: the target's one-token step and its
    verification blocks up to the largest K and tree the settings allow (MAX_K + 1 rows, MAX_TREE_NODES + 1;
    chains and trees share the buckets), and, for the draft model and the layer-skip drafter at its default
    exit, the one-token step, the catch-up of an accepted draft (2 rows) and the tree rounds (tree_growth's
    MAX_WIDTH rows at most). Forwards of more than COMPILED_ROWS rows, and prefills, run eagerly. The forwards
    of a learned drafter's target features (hidden states) and of another layer-skip exit compile at their
    first use."""
    from app.engine.drafters.registry import layer_skip_layers
    from app.engine.drafters.tree_growth import MAX_WIDTH
    from app.engine.settings import MAX_K, MAX_TREE_NODES, DrafterOptions

    context = models.context_length  # rows beyond it are never fed
    target_rows = min(max(MAX_K + 2, MAX_TREE_NODES + 1), context)  # K drafts, the last committed token, a bonus
    drafter_rows = min(max(2, MAX_WIDTH), context)
    plan = [WarmUpModel("target", models.target, None, row_buckets(target_rows))]
    if models.draft is not None:
        plan.append(WarmUpModel("draft model", models.draft, None, row_buckets(drafter_rows), "draft-model drafter"))
    if "layer-skip" in models.available_drafters:
        layers = layer_skip_layers(models, DrafterOptions())
        plan.append(WarmUpModel(f"layer skip ({len(layers)} layers)", models.target, layers,
                                row_buckets(drafter_rows), "layer-skip drafter"))
    return plan


def warm_up(models: LoadedModels, progress=None) -> None:
    """Compile now what `warm_up_plan` says, one shape at a time, through the step a generation runs
    (`CachedModel.warm_up`) on scratch caches; `progress(fraction, message)` before each step ('compiling
    target: verify 8 rows (3/14)'). A progress callback that raises abandons the load between two steps. A
    compile that fails, or any other failure of a step, does not fail the load: the models run eagerly from then
    on, with a notice at the next generation (`Execution.give_up_compiling`)."""
    report = progress or (lambda fraction, message: None)
    execution = models.execution
    if not execution.compiles:
        return
    caches = [(entry, CachedModel(entry.model, entry.layers, execution=execution, role=entry.role))
              for entry in warm_up_plan(models)]
    caches = [(entry, cached) for entry, cached in caches if cached.compiled]  # a model on the dynamic cache: eager
    total = max(1, sum(len(entry.buckets) for entry, _ in caches))
    # CUDA graphs: a first run, the capture, a replay, so that a capture that fails does so now. The decoder's
    # own caches sit at other addresses: their first forwards capture again (a forward's time, no compile).
    runs = 3 if models.device.type == "cuda" else 1
    done = 0
    for entry, cached in caches:
        for bucket in entry.buckets:
            report(done / total, f"compiling {entry.who}: {entry.step(bucket)} ({done + 1}/{total})")
            try:
                cached.warm_up(fewest_rows(bucket), runs)
            except Exception as exc:  # noqa: BLE001 - whatever fails here, the models can still run eagerly
                if is_out_of_memory(exc):
                    release_memory(exc)
                execution.give_up_compiling(exc)
            if not execution.compiles:
                report(1.0, "compiling failed: the models run eagerly")
                return
            done += 1
    synchronize(models.device)


def load_models(target: str | None = None, draft: str | None = None, device: str = "auto", dtype: str = "auto",
                device_map: str | None = None, progress=None, heads: str | None = None, cache: str | None = None,
                compile: bool | None = None, drafters: dict[str, str] | None = None) -> LoadedModels:
    """Load the target (and draft model); `progress(fraction, message)` is called between steps.

    `heads` is a folder of learned drafters trained for this target (format: app/engine/drafters/heads/format.py);
    the demo target gets the bundled ones under assets/models/demo/heads when they exist. `cache` ("dynamic" or
    "static") and `compile` choose how every model runs (app/engine/execution.py); None: the device's default.
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
    models = LoadedModels(target_model, tokenizer, target, torch_device, torch_dtype, execution=execution)
    models.default_exit_layer = exit_layer or max(1, models.num_layers // 2)
    models.suggested_repetition = suggested
    if draft:
        assert draft_files is not None, "fetched above whenever a draft model is named"
        report(0.75, f"loading {draft}")
        if not same_tokenizer_files(target_files, draft_files):  # a family's shared tokenizer is read once
            check_same_vocabulary(tokenizer, load_tokenizer(draft_files), target, draft)
        models.draft = load_causal_lm(draft_files, torch_device, torch_dtype)
        models.draft_name = draft
    if heads:
        from app.engine.drafters.heads import load_heads  # only when heads are asked for

        report(0.9, f"loading learned drafters from {heads}")
        models.extras.update(load_heads(models, Path(heads)))
    if drafters:
        from app.engine.drafters.published.detect import load_drafters  # only when checkpoints are given

        models.extras.update(load_drafters(models, drafters, _within(report, 0.9, 1.0)))
    if execution.compiles:
        warm_up(models, _within(whole, LOADING_SHARE, 1.0))
    whole(1.0, "ready")
    return models
