"""Where and in which precision a build trains: ``--device`` and ``--dtype``.

These do not change what the run *is* (its configuration and cache key), only
how fast it goes and its rounding: a run may start on one device and resume
on another. Weights and optimizer state stay float32; ``bfloat16`` runs the
forward and backward under ``torch.autocast``, the usual mixed-precision
recipe on GPUs (on a CPU it is slower than float32 and only tests the path).
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch

DEVICES = ("cpu", "cuda")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class Runtime:
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, not {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, not {self.dtype!r}")

    def autocast(self):
        """Mixed-precision context for a forward pass (a no-op in float32)."""
        if self.dtype == "float32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device, dtype=DTYPES[self.dtype])

    def describe(self) -> str:
        if self.device == "cuda":
            return f"{torch.cuda.get_device_name()} ({self.dtype} autocast)"
        return f"{torch.get_num_threads()} CPU threads ({self.dtype})"


CPU = Runtime()


def check_available(runtime: Runtime) -> None:
    """Fail before any work when the requested device cannot be used."""
    if runtime.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is available to this torch build "
                         f"(torch {torch.__version__}); use --device cpu")


def prepare(runtime: Runtime) -> None:
    """Fast float32 matmuls on GPUs (TF32) where bfloat16 is not requested."""
    if runtime.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
