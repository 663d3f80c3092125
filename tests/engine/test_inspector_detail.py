"""What the pass inspector is given at a sampled rejection: the residual, with the token drawn from it."""

from __future__ import annotations

import pytest
import torch

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.decoding.pass_events import INSPECT_TOP, batched_tops, residual_detail
from app.engine.events import PassEvent
from app.engine.loading import load_models
from app.engine.settings import DecodeSettings
from tests.engine.helpers import PROMPTS


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


def test_one_batched_search_finds_the_tops_each_search_alone_finds():
    torch.manual_seed(0)
    rows = {"p_top": torch.randn(5, 300).softmax(-1), "q_top": torch.randn(4, 300).softmax(-1).bfloat16(),
            "residual": torch.randn(3, 300).softmax(-1), "other_width": torch.randn(2, 40).softmax(-1)}
    tops = batched_tops(rows)
    for name, t in rows.items():
        values, ids = t.float().topk(INSPECT_TOP, dim=-1)
        assert torch.equal(tops[name][0], values) and torch.equal(tops[name][1], ids), name


@pytest.fixture(scope="module")
def decoder(tiny_llama):
    return SpeculativeDecoder(load_models(*map(str, tiny_llama)))


def _passes(decoder, settings, inspect: bool) -> list[PassEvent]:
    decoder.forget_caches()  # both runs start cold: a kept prefix would round the first logits differently
    return [e for e in decoder.generate(PROMPTS[0], settings, inspect=inspect) if isinstance(e, PassEvent)]


@pytest.mark.parametrize("verify", ["greedy", "sample"])
def test_a_run_without_the_inspector_commits_and_shows_the_same_but_the_detail(decoder, verify):
    settings = DecodeSettings(verify=verify, drafters=("draft-model",), k=4, max_new_tokens=16, seed=5)
    _passes(decoder, settings, False)  # t_T is timed in the first run only, which feeds the prompt differently
    shown, hidden = (_passes(decoder, settings, inspect) for inspect in (True, False))
    assert [(p.drafted, p.appended, p.ledger, p.path) for p in shown] == \
        [(p.drafted, p.appended, p.ledger, p.path) for p in hidden]
    assert all(p.detail.p_top and len(p.detail.p_top) == len(p.drafted) + 1 for p in shown)
    assert not any(p.detail.p_top or p.detail.q_top or p.detail.residual for p in hidden)
    if verify == "sample":
        assert any(p.detail.residual for p in shown)
