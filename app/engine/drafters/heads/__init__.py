"""Learned drafters trained for one target: Medusa heads, MTP modules, an EAGLE-style head, a DFlash block drafter.

One module per family (`medusa`, `mtp`, `eagle`, `dflash`), the parts they
share (`common`, `layers`), and the on-disk format with its loader (`format`,
documented there and in FORMAT.md next to the shipped weights).
"""

from app.engine.drafters.heads.common import HeadConfig, TargetParts, TargetShape, fused_layers
from app.engine.drafters.heads.format import (
    FAMILIES,
    HeadSpec,
    build_module,
    default_config,
    load_head,
    load_heads,
    read_config,
    save_head,
)

__all__ = ["FAMILIES", "HeadConfig", "HeadSpec", "TargetParts", "TargetShape", "build_module", "default_config",
           "fused_layers", "load_head", "load_heads", "read_config", "save_head"]
