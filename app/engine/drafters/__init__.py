"""Drafters: the protocol (`base`), one module per drafter, the learned heads (`heads/`) and the table of them all.

The package itself imports no torch: `registry` names every drafter for the
command line and the window; a drafter's module loads when it is built.
"""

from __future__ import annotations

from app.engine.drafters.registry import (
    DRAFTER_LABELS,
    DRAFTER_NAMES,
    DRAFTERS,
    DrafterEntry,
    available_drafters,
    build_drafter,
    drafter_config,
    layer_skip_layers,
)

__all__ = ["DRAFTERS", "DRAFTER_LABELS", "DRAFTER_NAMES", "DrafterEntry", "available_drafters", "build_drafter",
           "drafter_config", "layer_skip_layers"]
