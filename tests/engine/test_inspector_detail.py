"""What the pass inspector is given at a sampled rejection: the residual, with the token drawn from it."""

from __future__ import annotations

import pytest
import torch

from app.engine.decoding.pass_events import INSPECT_TOP, residual_detail


def test_the_sampled_token_is_recorded_even_outside_every_top():
    V = 4 * INSPECT_TOP
    p = torch.full((V,), 0.5 / (V - INSPECT_TOP))  # a long flat tail ...
    p[:INSPECT_TOP] = 0.5 / INSPECT_TOP  # ... under a head of INSPECT_TOP likely tokens
    q = torch.zeros(V)
    q[:INSPECT_TOP] = 1.0 / INSPECT_TOP  # the drafter put all its mass on the head
    residual = (p - q).clamp(min=0)
    residual /= residual.sum()  # r: the flat tail
    sampled = V - 1  # a residual draw from the tail, outside the top INSPECT_TOP of p, q and r alike
    assert sampled not in torch.cat([row.topk(INSPECT_TOP).indices for row in (p, q, residual)]).tolist()

    entries, other, norm = residual_detail(p, q, x=0, residual=residual, sampled=sampled)

    (entry,) = (e for e in entries if e.id == sampled)
    assert (entry.p, entry.q, entry.r) == pytest.approx((float(p[sampled]), 0.0, float(residual[sampled])))
    assert sum(e.r for e in entries) + other == pytest.approx(1.0)  # entries and the rest still add up
    assert norm == pytest.approx(0.5)  # sum max(0, p - q): the chance a draft from q is rejected here
