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

from app.engine.load_request import LoadRequest
from app.engine.settings import DecodeSettings, SettingsError, settings_from_dict

log = logging.getLogger(__name__)
DEFAULT_REQUEST = LoadRequest()  # the bundled demo family, the device's defaults
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
    passes_per_s: float = 0.0  # the Speed control (0 = full speed)
    pass_rows: bool = False  # the stream shows one pass per line


@dataclass(frozen=True)
class SavedState:
    """Every part of the window's saved state; None where nothing (usable) was saved."""

    layout: SavedLayout | None = None
    model_request: LoadRequest | None = None
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

    def _model_request(self) -> LoadRequest | None:
        raw = self.store.value("models/request")
        return LoadRequest.from_dict(json.loads(str(raw))) if raw else None

    def _decode(self) -> DecodeSettings | None:
        raw = self.store.value("decode/settings")
        return settings_from_dict(json.loads(str(raw))) if raw else None

    def _controls(self) -> SavedControls:
        value = self.store.value
        return SavedControls(prompt=str(value("controls/prompt", "") or ""),
                             chat_template=_as_bool(value("controls/chat_template", False)),
                             hide_rejected=_as_bool(value("view/hide_rejected", False)),
                             step_mode=_as_bool(value("view/step_mode", False)),
                             guide_seen=_as_bool(value("guide/seen", False)),
                             passes_per_s=max(0.0, float(str(value("view/passes_per_s", 0.0) or 0.0))),
                             pass_rows=_as_bool(value("view/pass_rows", False)))

    # --- writing -------------------------------------------------------------------------------
    def save(self, layout: SavedLayout, model_request: LoadRequest, decode: DecodeSettings,
             controls: SavedControls) -> None:
        store = self.store
        store.setValue("window/geometry", layout.geometry)
        store.setValue("window/state", layout.state)
        store.setValue("models/request", json.dumps(model_request.to_dict()))
        store.setValue("decode/settings", json.dumps(decode.to_dict()))
        store.setValue("controls/prompt", controls.prompt)
        store.setValue("controls/chat_template", controls.chat_template)
        store.setValue("view/hide_rejected", controls.hide_rejected)
        store.setValue("view/step_mode", controls.step_mode)
        store.setValue("guide/seen", controls.guide_seen)
        store.setValue("view/passes_per_s", controls.passes_per_s)
        store.setValue("view/pass_rows", controls.pass_rows)
        store.sync()


def _warning(why: str) -> str:
    message = f"Saved settings ignored ({why}); defaults are used."
    log.warning(message)
    return message


def _as_bool(value) -> bool:
    return value is True or str(value).lower() in ("true", "1", "yes")
