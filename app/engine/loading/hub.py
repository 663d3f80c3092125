"""Fetching a model's files (a local folder, or a hub id downloaded with progress) and loading them, with load
errors that say what to do."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.engine.errors import ModelLoadError, OutOfMemoryError, is_out_of_memory, release_memory
from app.engine.paths import looks_like_path

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    # What AutoModelForCausalLM.from_pretrained is declared to return: a PreTrainedModel that can also `generate`.
    from transformers.models.auto.modeling_auto import _BaseModelWithGenerate as CausalLM


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
