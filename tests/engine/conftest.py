"""Fixtures the engine's tests share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch


@contextmanager
def compiles_counted() -> Iterator:
    """torch.compile traced by dynamo with a backend that counts the graphs (`frame_count`) and runs them eagerly:
    quick, and no C++ compiler needed. Dynamo starts and ends with nothing compiled."""
    from torch._dynamo.testing import CompileCounter

    counter, original = CompileCounter(), torch.compile
    torch.compiler.reset()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "compile", lambda step, mode=None, dynamic=None: original(step, backend=counter,
                                                                                      dynamic=dynamic))
        yield counter
    torch.compiler.reset()


@pytest.fixture
def counted_compiles():
    with compiles_counted() as counter:
        yield counter
