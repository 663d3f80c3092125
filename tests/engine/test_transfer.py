"""Host-to-device copies are queued without making the host wait (app/engine/core/transfer.py)."""

from __future__ import annotations

import torch

from app.engine.core.transfer import to_device


class HostTensor:
    """Stands in for a host tensor on a machine with CUDA: records how it is copied."""

    device = torch.device("cpu")

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def pin_memory(self):
        self.calls.append(("pin_memory",))
        return self

    def to(self, device, non_blocking=False):
        self.calls.append(("to", torch.device(device).type, non_blocking))
        return self


def test_a_copy_to_cuda_is_staged_in_pinned_memory_and_queued():
    host = HostTensor()
    to_device(host, torch.device("cuda"))  # type: ignore[arg-type]
    assert host.calls == [("pin_memory",), ("to", "cuda", True)]


def test_other_copies_are_plain_and_keep_the_values():
    host = HostTensor()
    to_device(host, torch.device("mps"))  # type: ignore[arg-type] - MPS has no pinned staging of its own
    assert host.calls == [("to", "mps", False)]
    values = torch.arange(5)
    assert torch.equal(to_device(values, torch.device("cpu")), values)
