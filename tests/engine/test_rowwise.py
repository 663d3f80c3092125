"""Row-wise argmax and top-k by blocks give torch's answers: the first maximum, the largest values in order."""

from __future__ import annotations

import pytest
import torch

from app.engine.core import rowwise

SHAPES = [(1, 32000), (5, 8192), (3, 50257), (2, 3, 40000), (151936,)]  # whole blocks, a tail, leading dims, 1-D


@pytest.mark.parametrize("shape", SHAPES)
def test_blocks_are_used_and_agree_with_torch(shape):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape) * shape[-1]))
    assert rowwise._by_blocks(x, 8)  # noqa: SLF001 - the path under test
    assert torch.equal(rowwise.argmax(x), x.argmax(dim=-1))
    for k in (1, 8, 20):
        values, ids = rowwise.topk(x, k)
        expected_values, _ = x.topk(k, dim=-1)
        assert torch.equal(values, expected_values)
        assert torch.equal(x.gather(-1, ids), values)  # each id holds its value
        assert (ids.sort(dim=-1).values.diff(dim=-1) > 0).all()  # distinct ids


@pytest.mark.parametrize("where", [(3, 5000), (70, 8000), (4000, 49900), (0, 50256), (50250, 50256)])
def test_ties_resolve_to_the_first_maximum_as_torch(where):
    """Equal maxima in two blocks, in one block, in the body and the tail, and both in the tail."""
    x = torch.randn(2, 50257, generator=torch.Generator().manual_seed(1)) - 10.0
    first, second = where
    x[:, first] = x[:, second] = 5.0
    assert torch.equal(rowwise.argmax(x), x.argmax(dim=-1))
    assert rowwise.argmax(x).tolist() == [first, first]


def test_a_maximum_in_the_tail_alone_is_found():
    x = torch.zeros(1, 50257)
    x[0, 50256] = 1.0
    assert rowwise.argmax(x).tolist() == [50256]
    assert rowwise.topk(x, 2)[1][0, 0].item() == 50256


def test_short_rows_and_half_precision_take_torch_directly():
    small = torch.randn(1, 4096)
    assert not rowwise._by_blocks(small, 8)  # noqa: SLF001
    assert torch.equal(rowwise.argmax(small), small.argmax(dim=-1))
    half = torch.randn(4, 32000).to(torch.bfloat16)
    assert torch.equal(rowwise.argmax(half), half.argmax(dim=-1))
    assert torch.equal(rowwise.topk(half, 8)[0], half.topk(8, dim=-1).values)


def test_k_beyond_the_row_is_the_whole_row():
    x = torch.randn(3, 10)
    values, ids = rowwise.topk(x, 50)
    assert values.shape == (3, 10) and torch.equal(values, x.sort(dim=-1, descending=True).values)
