"""A pass waits for the device once: what its rule and its event need comes back in one read.

The tests run on the CPU, so "device tensor" means a tensor computed from the verification forward's
logits, the drafter's q or a random draw. A dispatch mode follows them through every operation and records
each one that would make the host wait for a device (reading a value: item, int, float, bool, tolist; or an
output whose size depends on the values: nonzero, unique, masked_select), except inside the pass's one
`fetch`, which the test routes through the packed copy a device uses (`.cpu()`: the read itself).
Greedy, sampled and ASD chain passes and greedy and sampled tree passes read once.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import app.engine.core.rules as rules
import app.engine.core.tree as tree
import app.engine.decoding.blocks as blocks
import app.engine.decoding.pass_events as pass_events
from app.engine.core.verify import read_packed
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.events import PassEvent
from app.engine.loading import load_models
from app.engine.settings import DecodeSettings, RepetitionSettings, SamplingSettings
from tests.engine.helpers import PROMPTS, run

MARK = "_from_device"
aten = torch.ops.aten
READS_BACK = {aten._local_scalar_dense, aten.is_nonzero, aten.equal, aten.nonzero,  # noqa: SLF001 - aten's names
              aten.masked_select, aten._unique2, aten.unique_dim, aten.unique_consecutive}  # noqa: SLF001


def _marked(t) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, MARK, False)


def mark(t):
    for leaf in tree_leaves(t):
        if isinstance(leaf, torch.Tensor):
            setattr(leaf, MARK, True)
    return t


class DeviceReads(TorchDispatchMode):
    """Marks what is computed from marked tensors (or drawn from a generator once the pass verifies: a drafter's
    own draws come before) and records reads of it."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.fetching = False
        self.verifying = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        from_device = any(_marked(t) for t in tree_leaves((args, kwargs)))
        if from_device and not self.fetching and func.overloadpacket in READS_BACK:
            self.reads.append(str(func))
        out = func(*args, **kwargs)
        if not self.fetching and (from_device or (self.verifying and kwargs.get("generator") is not None)):
            mark(out)
        return out


@pytest.fixture(scope="module")
def decoder(tiny_llama):
    return SpeculativeDecoder(load_models(*map(str, tiny_llama)))


@pytest.fixture
def watched(decoder, monkeypatch):
    """The decoder with its target's logits and its drafts' q marked, its fetch counted and packed, and
    `tolist` watched; yields (mode, fetches per pass)."""
    mode = DeviceReads()
    per_pass: list[int] = []

    def fetch(tensors):
        per_pass[-1] += 1
        mode.fetching = True
        try:
            return read_packed(tensors)
        finally:
            mode.fetching = False

    def marking(method):
        def verify(*args, **kwargs):
            mode.verifying = True
            return mark(method(*args, **kwargs))
        return verify

    def counted_pass(*args, **kwargs):
        per_pass.append(0)
        mode.verifying = False
        return real_pass(*args, **kwargs)

    def marking_q(method):
        def draft(*args, **kwargs):
            proposal, name = method(*args, **kwargs)
            if proposal.q is not None:
                mark(proposal.q)
            return proposal, name
        return draft

    real_tolist = torch.Tensor.tolist

    def tolist(self):
        if _marked(self) and not mode.fetching:
            mode.reads.append("tolist")
        return real_tolist(self)

    real_pass = decoder._pass  # noqa: SLF001 - wrapped to count
    monkeypatch.setattr(blocks, "fetch", fetch)
    monkeypatch.setattr(torch.Tensor, "tolist", tolist)
    monkeypatch.setattr(decoder, "_pass", counted_pass)
    monkeypatch.setattr(decoder.chain, "draft", marking_q(decoder.chain.draft))
    monkeypatch.setattr(decoder.chain, "draft_tree", marking_q(decoder.chain.draft_tree))
    monkeypatch.setattr(decoder.target, "advance_to", marking(decoder.target.advance_to))
    monkeypatch.setattr(decoder.target, "extend_tree", marking(decoder.target.extend_tree))
    with mode:
        yield mode, per_pass


@pytest.mark.parametrize("settings", [
    dict(verify="greedy", drafters=(), k=4),
    dict(verify="greedy", drafters=("prompt-lookup",), k=4),
    dict(verify="greedy", drafters=("draft-model",), k=4),
    dict(verify="sample", drafters=("draft-model",), k=4, sampling=SamplingSettings(0.9, 0, 0.9)),
    dict(verify="sample", drafters=("prompt-lookup",), k=3, sampling=SamplingSettings(1.2, 20, 0.8)),
    dict(verify="sample", drafters=(), k=3),
    dict(verify="asd", drafters=("draft-model",), k=4),
    dict(verify="sample", drafters=("draft-model",), k=4, repetition=RepetitionSettings(1.3, 3)),
], ids=["plain", "prompt-lookup", "draft-model", "sample-q", "sample-one-hot", "sample-plain", "asd",
        "sample-repetition"])
def test_a_chain_pass_reads_the_device_once(decoder, watched, settings):
    mode, per_pass = watched
    passes, end = run(decoder, PROMPTS[1], max_new_tokens=20, seed=3, **settings)
    assert end.token_ids and len(per_pass) == len(passes)
    assert not mode.reads, sorted(set(mode.reads))
    assert per_pass == [1] * len(passes)
    if settings["verify"] == "sample" and settings["drafters"]:
        assert any(p.detail.residual for p in passes)  # the residual's entries came back in the same read


@pytest.mark.parametrize("settings", [
    dict(verify="greedy", drafters=("draft-model",), k=4, tree=10),
    dict(verify="greedy", drafters=("prompt-lookup",), k=4, tree=6),
    dict(verify="sample", drafters=("draft-model",), k=4, tree=10, sampling=SamplingSettings(0.9, 0, 0.9)),
    dict(verify="sample", drafters=("prompt-lookup",), k=4, tree=6, sampling=SamplingSettings(1.2, 20, 0.8)),
    dict(verify="sample", drafters=("draft-model",), k=3, tree=8, repetition=RepetitionSettings(1.3, 3)),
], ids=["greedy-draft-model", "greedy-prompt-lookup", "sample-iid", "sample-deterministic", "sample-repetition"])
def test_a_tree_pass_reads_the_device_once(decoder, watched, settings, monkeypatch):
    # The walk an accelerator runs (the CPU's own reads the host, where reading costs nothing).
    monkeypatch.setattr(rules, "sampled_walk", partial(tree.sampled_walk, batched=True))
    mode, per_pass = watched
    passes, _ = run(decoder, PROMPTS[1], max_new_tokens=20, seed=3, **settings)
    assert any(p.tree for p in passes)
    assert not mode.reads, sorted(set(mode.reads))  # the argmax (greedy) or the walk came back with the event
    assert per_pass == [1] * len(passes)
    if settings["verify"] == "sample" and settings["drafters"] == ("draft-model",):
        assert any(p.detail.residual for p in passes)  # the residual's entries came back in the same read


@pytest.mark.parametrize("inspect", [True, False])
def test_the_inspectors_tops_are_searched_once_per_pass_and_only_when_shown(decoder, watched, monkeypatch, inspect):
    mode, _ = watched
    searches: list[int] = []
    real_topk = pass_events.rowwise.topk

    def topk(x, k):
        searches.append(x.shape[0])
        return real_topk(x, k)

    monkeypatch.setattr(pass_events.rowwise, "topk", topk)
    events = list(decoder.generate(PROMPTS[1], DecodeSettings(
        verify="sample", drafters=("draft-model",), k=4, max_new_tokens=12, seed=3), inspect=inspect))
    passes = [e for e in events if isinstance(e, PassEvent)]
    if inspect:
        assert len(searches) == len(passes)  # p, q and the rejected row's p, q and r in one search
        assert all(p.detail.p_top for p in passes)
    else:
        assert not searches
        assert all(not p.detail.p_top and not p.detail.q_top and not p.detail.residual for p in passes)


def test_the_packed_read_keeps_every_value_and_shape():
    tensors = {
        "f32": torch.randn(3, 4), "f16": torch.randn(5).half(), "bf16": torch.randn(2, 2).bfloat16(),
        "long": torch.tensor([0, 151_935, 7]), "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3), "empty": torch.empty(0, 8), "nan": torch.tensor([float("nan"), float("inf")]),
        "strided": torch.arange(10.0)[::3],
    }
    host = read_packed(tensors)
    for name, t in tensors.items():
        assert host[name].shape == t.shape, name
        expected = t.float() if t.is_floating_point() else (t.bool() if t.dtype == torch.bool else t.long())
        assert host[name].dtype == expected.dtype, name
        assert torch.equal(host[name].nan_to_num(), expected.nan_to_num()), name


class FakeEvent:
    """A recorded CUDA event: a time stamp in ms."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def elapsed_time(self, later: FakeEvent) -> float:
        return later.ms - self.ms

    def synchronize(self) -> None:
        pytest.fail("the clock waited for an event")


def test_the_clock_on_a_cuda_device_marks_with_events_and_never_synchronises(monkeypatch):
    stamps = iter([10.0, 13.5, 20.0])
    monkeypatch.setattr(pass_events, "_recorded", lambda device: FakeEvent(next(stamps)))
    monkeypatch.setattr(pass_events, "synchronize", lambda device: pytest.fail("the clock synchronised"))
    clock = pass_events.PassClock(torch.device("cuda"))
    clock.mark_drafted()
    clock.mark_verified()
    timing = clock.timing()
    assert (timing.draft_ms, timing.verify_ms) == (3.5, 6.5)
    assert timing.total_ms >= 0


def test_the_stopwatch_on_a_cuda_device_records_events_and_reads_them_later(monkeypatch):
    stamps = iter([1.0, 3.0, 10.0, 10.5])
    monkeypatch.setattr(pass_events, "_recorded", lambda device: FakeEvent(next(stamps)))
    monkeypatch.setattr(pass_events, "synchronize", lambda device: pytest.fail("the stopwatch synchronised"))
    stopwatch = pass_events.Stopwatch(torch.device("cuda"))
    for _ in range(2):
        stopwatch.start()
        stopwatch.stop()
    assert stopwatch.samples_ms() == [2.0, 0.5]
