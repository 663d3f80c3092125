"""Checks of the model and heads paths a user typed, cheap enough to run before anything loads.

No torch and no transformers here: the command line calls these before it imports either, so that a
typo is reported in a fraction of a second instead of after the models load.
"""

from __future__ import annotations

from pathlib import Path

MODEL_CONFIG = "config.json"  # what from_pretrained reads first in a model folder, and every head folder holds


def looks_like_path(name: str) -> bool:
    """Hub ids look like `name` or `org/name`; anything else is meant as a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name or Path(name).expanduser().exists()


def model_path_problem(name: str) -> str | None:
    """What is wrong with `name` as a local model folder, or None (a hub id is left to the loader)."""
    if not looks_like_path(name):
        return None
    path = Path(name).expanduser()
    if not path.exists():
        return f"model folder {name!r} does not exist. Check the path."
    if not path.is_dir():
        return f"{name!r} is a file, not a model folder: give the folder that holds config.json and the weights."
    if not (path / MODEL_CONFIG).is_file():
        return (f"{name!r} is not a loadable model folder (no {MODEL_CONFIG}). It needs config.json, the weights "
                "(*.safetensors) and the tokenizer files.")
    return None


def heads_folder_problem(name: str) -> str | None:
    """What is wrong with `name` as a folder of learned heads (one sub-folder per head), or None."""
    root = Path(name).expanduser()
    if not root.is_dir():
        return (f"heads folder {name!r} does not exist. Give a folder with one sub-folder per head "
                "(config.json + model.safetensors).")
    if not any((sub / MODEL_CONFIG).is_file() for sub in root.iterdir()):
        return (f"heads folder {name!r} holds no head: it needs one sub-folder per head "
                "(config.json + model.safetensors).")
    return None
