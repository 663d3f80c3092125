"""What the window remembers between launches, read from and written to a QSettings store.

`SettingsStore.load` reads each part on its own and checks it: a part that
is missing or corrupted is left out (None) with a warning, and the others
still apply. The window decides how each part is shown.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from PySide6.QtCore import QByteArray, QSettings

from app.engine.settings import DecodeSettings, SettingsError, settings_from_dict

log = logging.getLogger(__name__)
DEFAULT_REQUEST = dict(target=None, draft=None, device="auto", dtype="auto", cache=None, compile=None)
T = TypeVar("T")
_CORRUPTED = (TypeError, ValueError, KeyError, SettingsError, json.JSONDecodeError)


@dataclass(frozen=True)
class SavedLayout:
    geometry: QByteArray | None
    state: QByteArray | None


@dataclass(frozen=True)
class SavedControls:
    prompt: str
    chat_template: bool
    hide_rejected: bool
    step_mode: bool
    guide_seen: bool


@dataclass(frozen=True)
class SavedState:
    """Every part of the window's saved state; None where nothing (usable) was saved."""

    layout: SavedLayout | None = None
    model_request: dict | None = None
    decode: DecodeSettings | None = None
    controls: SavedControls | None = None
    warnings: tuple[str, ...] = ()


class SettingsStore:
    def __init__(self, store: QSettings) -> None:
        self.store = store

    # --- reading -------------------------------------------------------------------------------
    def load(self) -> SavedState:
        if self.store.status() != QSettings.Status.NoError:
            return SavedState(warnings=(_warning("the settings file could not be read"),))
        warnings: list[str] = []

        def part(name: str, read: Callable[[], T]) -> T | None:
            try:
                return read()
            except _CORRUPTED as error:
                warnings.append(_warning(f"{name}: {error}"))
                return None

        return SavedState(layout=part("layout", self._layout), model_request=part("models", self._model_request),
                          decode=part("decode", self._decode), controls=part("controls", self._controls),
                          warnings=tuple(warnings))

    def _layout(self) -> SavedLayout:
        geometry, state = self.store.value("window/geometry"), self.store.value("window/state")
        return SavedLayout(geometry if isinstance(geometry, QByteArray) else None,
                           state if isinstance(state, QByteArray) else None)

    def _model_request(self) -> dict | None:
        raw = self.store.value("models/request")
        if not raw:
            return None
        request = json.loads(str(raw))
        if not isinstance(request, dict) or set(request) - set(DEFAULT_REQUEST) - {"drafters"}:
            raise ValueError("unexpected model request")
        checkpoints = request.get("drafters", {})  # published drafter checkpoints: {drafter name: hub id or folder}
        if not isinstance(checkpoints, dict) or not all(isinstance(v, str) for v in checkpoints.values()):
            raise ValueError("drafter checkpoints must be text")
        if not all(value is None or isinstance(value, str) for key, value in request.items()
                   if key not in ("compile", "drafters")):
            raise ValueError("model names, device, dtype and cache must be text")
        if request.get("compile") not in (None, True, False):
            raise ValueError("compile must be on, off or unset")
        return {**DEFAULT_REQUEST, **request}

    def _decode(self) -> DecodeSettings | None:
        raw = self.store.value("decode/settings")
        return settings_from_dict(json.loads(str(raw))) if raw else None

    def _controls(self) -> SavedControls:
        value = self.store.value
        return SavedControls(prompt=str(value("controls/prompt", "") or ""),
                             chat_template=_as_bool(value("controls/chat_template", False)),
                             hide_rejected=_as_bool(value("view/hide_rejected", False)),
                             step_mode=_as_bool(value("view/step_mode", False)),
                             guide_seen=_as_bool(value("guide/seen", False)))

    # --- writing -------------------------------------------------------------------------------
    def save(self, layout: SavedLayout, model_request: dict, decode: DecodeSettings, controls: SavedControls) -> None:
        store = self.store
        store.setValue("window/geometry", layout.geometry)
        store.setValue("window/state", layout.state)
        store.setValue("models/request", json.dumps(model_request))
        store.setValue("decode/settings", json.dumps(decode.to_dict()))
        store.setValue("controls/prompt", controls.prompt)
        store.setValue("controls/chat_template", controls.chat_template)
        store.setValue("view/hide_rejected", controls.hide_rejected)
        store.setValue("view/step_mode", controls.step_mode)
        store.setValue("guide/seen", controls.guide_seen)
        store.sync()


def _warning(why: str) -> str:
    message = f"Saved settings ignored ({why}); defaults are used."
    log.warning(message)
    return message


def _as_bool(value) -> bool:
    return value is True or str(value).lower() in ("true", "1", "yes")
