"""The device and dtype the models run on, and waiting for the work queued on it.

Device "auto" picks cuda > mps > cpu; dtype "auto" picks bf16 on CUDA where supported, fp16 on MPS, fp32 on CPU.
"""

from __future__ import annotations

import torch

from app.engine.errors import ModelLoadError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def resolve_device(device: str = "auto") -> torch.device:
    if device != "auto":
        try:
            chosen = torch.device(device)
        except RuntimeError as exc:
            raise ModelLoadError(f"unknown device {device!r}: {exc}. Use auto, cpu, cuda, cuda:N or mps.") from exc
        _require_available(chosen)
        return chosen
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _require_available(device: torch.device) -> None:
    """Say so now if the device is missing, instead of a cryptic failure halfway through loading."""
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ModelLoadError("device 'cuda' is not available here (no CUDA GPU or no CUDA build of torch); "
                                 "choose auto or cpu.")
        if device.index is not None and device.index >= count:
            raise ModelLoadError(f"device {str(device)!r} does not exist: this machine has {count} CUDA device(s), "
                                 f"cuda:0 to cuda:{count - 1}.")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ModelLoadError("device 'mps' is not available here (Apple silicon only); choose auto or cpu.")


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so that a clock read afterwards measures it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype != "auto":
        if dtype not in DTYPES:
            raise ModelLoadError(f"unknown dtype {dtype!r}; use auto, float32, float16 or bfloat16.")
        return DTYPES[dtype]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32
