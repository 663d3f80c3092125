"""Typed errors a user can hit; every message says what to do about it."""

from __future__ import annotations

from app.engine.settings import SettingsError


class EngineError(Exception):
    """Base of the errors the window shows in a message instead of a traceback."""


class ModelLoadError(EngineError):
    """A model or tokenizer could not be loaded (missing folder, unknown id, no network, bad weights)."""


class IncompatibleTokenizerError(EngineError):
    """The drafter does not share the target's vocabulary."""


class DrafterError(EngineError):
    """A drafter failed during a pass; the decoder skips it and reports this."""


class ContextTooLongError(EngineError):
    """The prompt does not fit in the target's context window."""


class OutOfMemoryError(EngineError):
    """The device ran out of memory; memory was released."""


__all__ = [
    "EngineError",
    "ModelLoadError",
    "IncompatibleTokenizerError",
    "DrafterError",
    "ContextTooLongError",
    "OutOfMemoryError",
    "SettingsError",
]
