"""Exact arithmetic on the host: the one way float64 enters the engine.

Some accelerators have no float64 at all (Apple's MPS) and it is slow on most
GPUs, so device work stays in the model's dtype or float32. Where a decision
needs exact arithmetic (ASD regret and its ledger, docs/ALGORITHMS.md §5.1;
the inspector's residual sums), the few numbers it needs are gathered on the
device in their own dtype, copied to the CPU, and only there widened to
float64, which holds every float16, bfloat16 and float32 value exactly.

`to_host_float64` is that copy. It runs inside `host_scope()`, which a test's
dispatch mode reads to tell the engine's sanctioned host float64 from a
float64 operation on a device tensor (tests/engine/test_no_float64_on_device.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

HOST = torch.device("cpu")
_scope = threading.local()


@contextmanager
def host_scope() -> Iterator[None]:
    """Mark the float64 operations run inside as host-side exact arithmetic."""
    depth = getattr(_scope, "depth", 0)
    _scope.depth = depth + 1
    try:
        yield
    finally:
        _scope.depth = depth


def in_host_scope() -> bool:
    """Whether the calling thread is inside `host_scope()`."""
    return getattr(_scope, "depth", 0) > 0


def to_host_float64(t: Tensor) -> Tensor:
    """`t` copied to the CPU first, then widened to float64 there (exact for every float dtype and integers < 2^53)."""
    with host_scope():
        return t.detach().to(HOST).to(torch.float64)
