"""The published checkpoint formats each learned drafter reads, by name (no torch: the command line's --help and
the window list them before the engine loads)."""

from __future__ import annotations

SPECFORGE = "EAGLE-3 (SafeAILab / SpecForge)"
SPECULATORS = "EAGLE-3 (speculators)"
MEDUSA = "Medusa (FasterDecoding)"

# Learned drafter name -> the formats a checkpoint given for it may be in (detect.py tells them apart).
READS: dict[str, tuple[str, ...]] = {"eagle": (SPECFORGE, SPECULATORS), "medusa": (MEDUSA,)}


def checkpoint_option(name: str) -> str:
    """The command-line option that gives drafter `name` a checkpoint: --eagle."""
    return f"--{name}"


def checkpoints_from(values: dict[str, str | None]) -> dict[str, str]:
    """{drafter name: folder or hub id} of the checkpoints given (None: not given)."""
    return {name: value for name, value in values.items() if name in READS and value}
