"""Which models to load and how: the one value that travels from the model dialog, the saved settings and the
command line to `load_models`, in this process or in an engine process (app/engine/protocol.py).

    request = LoadRequest(target="Qwen/Qwen3-0.6B", device="cpu")   # LoadRequest(): the bundled demo family
    load_models(**request.to_dict())
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class LoadRequest:
    """`load_models`' arguments as plain data (it pickles to an engine process and saves as JSON)."""

    target: str | None = None  # a hub id or folder; None: the bundled demo family
    draft: str | None = None  # a draft model for the target; None: the family's own, if any
    device: str = "auto"
    dtype: str = "auto"
    cache: str | None = None  # "dynamic" | "static"; None: the device's default (app/engine/execution.py)
    compile: bool | None = None  # compile the short forwards; None: the device's default
    device_map: str | None = None  # e.g. "auto": spread a target too large for one device (the command line's)
    heads: str | None = None  # a folder of learned drafters trained for this target (the command line's)
    drafters: tuple[tuple[str, str], ...] = ()  # published drafter checkpoints: (drafter name, hub id or folder)

    @property
    def bundled(self) -> bool:
        """The bundled demo family (no target named)."""
        return self.target is None

    def with_changes(self, **changes: Any) -> LoadRequest:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """`load_models`' keyword arguments; also the saved settings' JSON."""
        return {**asdict(self), "drafters": dict(self.drafters) or None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadRequest:
        """A request from its dict (saved settings, a notebook's `dict(target=...)`); ValueError if it is not one."""
        if not isinstance(data, Mapping) or set(data) - {field.name for field in fields(cls)}:
            raise ValueError("unexpected model request")
        if not all(value is None or isinstance(value, str) for key, value in data.items()
                   if key not in ("compile", "drafters")):
            raise ValueError("model names, device, dtype, cache and folders must be text")
        if data.get("compile") not in (None, True, False):
            raise ValueError("compile must be on, off or unset")
        checkpoints = data.get("drafters") or {}
        if not isinstance(checkpoints, Mapping) or not all(isinstance(name, str) and isinstance(source, str)
                                                           for name, source in checkpoints.items()):
            raise ValueError("drafter checkpoints must map a drafter's name to a hub id or folder")
        return cls(**{**data, "drafters": tuple(sorted(checkpoints.items()))})

    @classmethod
    def of(cls, request: LoadRequest | Mapping[str, Any]) -> LoadRequest:
        """`request` itself, or the request its dict describes (the engine's entry points take either)."""
        return request if isinstance(request, LoadRequest) else cls.from_dict(request)
