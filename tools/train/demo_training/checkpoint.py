"""Atomic file writes and resumable training state.

Every file is written to a temporary name in the same folder and renamed into
place, so a process killed mid-write leaves either the old file or the new
one, never a truncated one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` then rename the result onto ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


def atomic_torch_save(obj: Any, path: Path) -> None:
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def atomic_write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def atomic_replace_folder(folder: Path, fill: Callable[[Path], None]) -> None:
    """Build a folder under a temporary name, then swap it into place."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    fill(tmp)
    old = folder.with_name(f".{folder.name}.old-{os.getpid()}")
    if folder.exists():
        os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


def load_if_exists(path: Path) -> Any | None:
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)
