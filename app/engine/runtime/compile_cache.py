"""Compile once, not every launch: the compiled forwards' caches kept in the user cache folder.

A compiling load (app/engine/execution.py) runs each short forward through dynamo, AOT autograd and Inductor.
Inductor's graph cache and AOT autograd's cache (and, on CUDA, Triton's kernels) live under one folder,
Inductor's cache folder: by default in the system's temporary folder, which a reboot may empty. Loading points
that folder at a place of its own in the user cache folder, one per key, the models, the dtype, the torch
version and the device (with the GPU's name), so a second launch of the same models finds every graph compiled
and only traces them again with dynamo (seconds instead of minutes). A key's folder holds nothing but what
torch writes there; deleting it costs one slow load.

`SPEC_PLAYGROUND_CACHE` names another user cache folder; a `TORCHINDUCTOR_CACHE_DIR` set before the engine was
imported is the user's own choice and is left alone, unless it names torch's own default folder: Inductor writes
that one into the environment the first time anything asks where its cache is (importing transformers does).
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import sys
import tempfile
from pathlib import Path

APPLICATION = "speculative-decoding-playground"
CACHE_ENV = "SPEC_PLAYGROUND_CACHE"
INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"
USER_INDUCTOR_DIR = os.environ.get(INDUCTOR_ENV)  # set before the engine was imported: the user's, or torch's


def inductor_default_folder() -> Path:
    """Inductor's cache folder when nobody chose one: `torchinductor_<user>` in the temporary folder. Should a
    torch release move it, that release's default reads as a user's choice and compiling caches there."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return Path(tempfile.gettempdir()).absolute() / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def user_chose_inductor_folder() -> bool:
    """Whether `TORCHINDUCTOR_CACHE_DIR`, as it stood when the engine was imported, is the user's choice."""
    chosen = USER_INDUCTOR_DIR
    return bool(chosen) and Path(str(chosen)).absolute() != inductor_default_folder()


def user_cache_folder() -> Path:
    """The platform's per-user cache folder for this application (`SPEC_PLAYGROUND_CACHE` overrides it)."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen).expanduser()
    home = Path.home()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = home / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
    return base / APPLICATION


def compile_key(models: tuple[str, ...], dtype: str, torch_version: str, device: str) -> str:
    """A folder name for one set of compiled forwards: readable (the target's name, dtype, torch, device) and
    unique (a hash of every part, the other models' names included)."""
    parts = (*models, dtype, torch_version, device)
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]
    readable = "-".join([Path(models[0]).name or models[0], dtype.removeprefix("torch."), f"torch{torch_version}",
                         device])
    return f"{re.sub(r'[^A-Za-z0-9._+-]+', '_', readable)[:120]}-{digest}"


def device_words(device) -> str:
    """'cpu', 'mps', or 'cuda-<GPU name>': compiled kernels are specific to the GPU they were tuned on."""
    import torch

    if device.type != "cuda":
        return device.type
    return f"cuda-{torch.cuda.get_device_name(device)}"


def keep_compiled(models: tuple[str, ...], dtype, device) -> Path | None:
    """Point Inductor's cache at the folder of this key (created) before compiling; the folder, or None when the
    user chose Inductor's folder, or the user cache folder cannot be written (compiling then caches where torch
    would anyway)."""
    import torch

    if user_chose_inductor_folder():
        return None
    folder = user_cache_folder() / "compiled" / compile_key(models, str(dtype), torch.__version__,
                                                              device_words(device))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    os.environ[INDUCTOR_ENV] = str(folder)
    return folder
