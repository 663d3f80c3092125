"""Files from the Hugging Face hub with progress, and load errors in words a user can act on: what a model's
loader (loading/hub.py) and a published drafter's (drafters/published/checkpoint.py) share."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from app.engine.errors import ModelLoadError
from app.engine.paths import looks_like_path


def download_snapshot(name: str, patterns: Iterable[str], report=None) -> str:
    """The local folder of hub repo `name`'s files matching `patterns`, downloading what the cache lacks with
    `report(fraction, message)` as the bytes arrive; a ModelLoadError that says what to do when it cannot."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(name, allow_patterns=list(patterns), tqdm_class=_download_progress(name, report))
    except Exception as exc:
        raise load_error(name, exc) from exc


def load_error(name: str, exc: Exception) -> ModelLoadError:
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
    hub = _hub_problem(name, exc)
    if hub is not None:
        return ModelLoadError(hub)
    offline = os.environ.get("HF_HUB_OFFLINE") == "1"
    hint = ("the hub is switched off (HF_HUB_OFFLINE=1): use a model already in the local cache or a local folder"
            if offline else "check the id and your network, or give a local folder")
    return ModelLoadError(f"could not load {name!r} ({type(exc).__name__}: {_first_line(exc)}); {hint}.")


def _hub_problem(name: str, exc: BaseException) -> str | None:
    """A hub id that cannot be fetched, in plain words (no exception class names), or None."""
    kinds = set()
    current: BaseException | None = exc
    while current is not None:
        kinds.add(type(current).__name__)
        current = current.__cause__ or current.__context__
    if "RepositoryNotFoundError" in kinds:
        return f"there is no model {name!r} on the Hugging Face hub (or it is private): check the id."
    if "GatedRepoError" in kinds:
        return f"{name!r} is gated on the hub: accept its licence on its page and log in with `hf auth login`."
    if kinds & {"LocalEntryNotFoundError", "ConnectError", "ConnectionError", "OfflineModeIsEnabled"}:
        if os.environ.get("HF_HUB_OFFLINE") == "1":
            return (f"{name!r} is not in the local model cache, and the hub is switched off (HF_HUB_OFFLINE=1): "
                    "download it once with the hub on, or give a local folder.")
        return (f"{name!r} is not in the local model cache and the hub cannot be reached (no network?): connect "
                "and load it again, or give a local folder.")
    return None


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
