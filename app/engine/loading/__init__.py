"""Loading: from a model's name to ready `LoadedModels`.

`load_models` (load.py) is the way in. Beside it: the frozen value it returns (models.py), fetching files and
turning load failures into messages that say what to do (hub.py), and the compile plan that ends a compiling
load (warm_up.py). The device and dtype choices are runtime/devices.py's.
"""

from __future__ import annotations

from app.engine.loading.load import load_models
from app.engine.loading.models import LoadedModels

__all__ = ["LoadedModels", "load_models"]
