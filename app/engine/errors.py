"""Typed errors a user can hit; every message says what to do about it."""

from __future__ import annotations

from app.engine.settings import SettingsError

# How allocators word an out-of-memory failure that is not raised as a typed error.
_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory", "failed to allocate")


class EngineError(Exception):
    """Base of the errors the window shows in a message instead of a traceback."""


class ModelLoadError(EngineError):
    """A model or tokenizer could not be loaded (missing folder, unknown id, no network, bad weights)."""


class DrafterCheckpointError(ModelLoadError):
    """A published drafter checkpoint (EAGLE-3, speculators, Medusa ...) does not fit the loaded target."""


class IncompatibleTokenizerError(EngineError):
    """The drafter does not share the target's vocabulary."""


class ContextTooLongError(EngineError):
    """The prompt does not fit in the target's context window."""


class OutOfMemoryError(EngineError):
    """The device ran out of memory; memory was released."""


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA / MPS / CPU allocation failures, whatever their exception type."""
    import torch  # here, so that the window's process can name these errors without loading torch

    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(word in str(exc).lower() for word in _OOM_WORDS)


def release_memory(failure: BaseException | None = None) -> None:
    """Free what a failed step allocated and return it to the device, so the next try starts clean.

    The failure's traceback keeps the frames of the failed step, and with them its tensors, alive:
    clearing those frames is what actually lets the memory go.
    """
    import gc
    import traceback

    import torch

    if failure is not None and failure.__traceback__ is not None:
        traceback.clear_frames(failure.__traceback__)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    mps = getattr(torch, "mps", None)
    if mps is not None and getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        mps.empty_cache()


__all__ = [
    "is_out_of_memory",
    "release_memory",
    "EngineError",
    "ModelLoadError",
    "DrafterCheckpointError",
    "IncompatibleTokenizerError",
    "ContextTooLongError",
    "OutOfMemoryError",
    "SettingsError",
]
