"""Host-to-device copies that do not make the host wait.

A copy from ordinary (pageable) host memory to a CUDA device made the plain way, `tensor.to(device)`,
synchronises the stream: the host waits until every kernel queued so far has run, and the GPU then idles while
the next forward is launched. A pass copies its inputs (token ids, positions, a tree's indices) after a drafter's
forwards are queued, so each plain copy would be a stall. Staged through pinned memory the copy is queued like a
kernel (gpt-fast and vLLM do the same); PyTorch's pinned-memory allocator keeps the staging buffer until the copy
has run, so the caller may drop or reuse its tensor at once.
"""

from __future__ import annotations

import torch


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` on `device`, queued without waiting when it goes from the host to a CUDA device (the same values
    as `tensor.to(device)` everywhere)."""
    if device.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)
