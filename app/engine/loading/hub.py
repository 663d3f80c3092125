"""Fetching a model's files (a local folder, or a hub id downloaded with progress) and loading them, with load
errors that say what to do."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from app.engine.download import download_snapshot, load_error
from app.engine.errors import OutOfMemoryError, is_out_of_memory, release_memory
from app.engine.paths import looks_like_path

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from app.engine.hf_compat import CausalLM


# What from_pretrained reads of a hub repo; other weight formats (.bin, .h5, .onnx, gguf ...) are left on the hub.
HUB_FILES = ("*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken", "*.py")


def fetch_from_hub(name: str, report=None) -> str:
    """A local folder for `name`: a folder as it is, a hub id's files in the local cache (downloading what is
    missing, with `report(fraction, message)` as the bytes arrive). A repo without safetensors weights is
    returned as the id, so that from_pretrained fetches its other weight format itself."""
    if looks_like_path(name):
        return name
    folder = download_snapshot(name, HUB_FILES, report)
    return folder if any(Path(folder).glob("*.safetensors")) else name


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    try:
        return AutoTokenizer.from_pretrained(os.path.expanduser(name))
    except Exception as exc:
        raise load_error(name, exc) from exc


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
        raise load_error(name, exc) from exc
    assert model is not None, "set in the try block; the except block always raises"
    return model.eval()
