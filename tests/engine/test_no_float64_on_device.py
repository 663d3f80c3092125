"""No float64 on the model's device (CONTRIBUTING: some accelerators, such as Apple's MPS, have none).

The tests run on the CPU, so "device tensor" means every tensor except the
host-side exact values the engine makes through `app.engine.core.exact.to_host_float64`
and what is computed from them alone. A dispatch mode watches every aten
operation of whole generations on a tiny model and records each one that
produces or consumes any other float64 tensor.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from app.engine.core.exact import in_host_scope, to_host_float64
from app.engine.core.sampling import warp_probs
from app.engine.core.verify import verify_asd
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.loading import load_models
from app.engine.settings import RepetitionSettings, SamplingSettings
from tests.engine.helpers import PROMPTS, run

HOST_MARK = "_exact_on_host"  # set on float64 tensors made by the helper or from host values alone


def _is_host_exact(t: torch.Tensor) -> bool:
    return getattr(t, HOST_MARK, False) and t.device.type == "cpu"


class NoFloat64OnDevice(TorchDispatchMode):
    """Records every operation that makes or reads a float64 tensor outside the host helper's provenance.

    A float64 result is allowed when it is made inside `host_scope()` (the helper's copy) or when every
    float64 input is itself such a host value (arithmetic on the host); it then carries the mark on.
    """

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        wide_in = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.dtype == torch.float64]
        wide_out = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.dtype == torch.float64]
        if not wide_in and not wide_out:
            return out
        if (wide_in and all(_is_host_exact(t) for t in wide_in)) or (not wide_in and in_host_scope()):
            for t in wide_out:
                if t.device.type != "cpu":
                    self.violations.append(f"{func}: host float64 moved to {t.device}")
                setattr(t, HOST_MARK, True)
            return out
        self.violations.append(f"{func}: float64 on a device tensor")
        return out


def guarded(fn, *args, **kwargs):
    mode = NoFloat64OnDevice()
    with mode:
        result = fn(*args, **kwargs)
    assert not mode.violations, sorted(set(mode.violations))
    return result


@pytest.fixture(scope="module")
def decoder(tiny_llama):
    target, draft = tiny_llama
    return SpeculativeDecoder(load_models(str(target), str(draft)))


def test_the_guard_catches_float64_on_a_device_tensor_and_allows_the_host_helper():
    z = torch.randn(3, 5)  # (K+1, V) stands for device logits
    mode = NoFloat64OnDevice()
    with mode:
        z.double().sum()
    assert mode.violations
    guarded(lambda: (to_host_float64(z[:, :2]).cumsum(0) * 2).tolist())


@pytest.mark.parametrize("settings", [
    dict(verify="greedy", drafters=("draft-model",), k=4),
    dict(verify="greedy", drafters=(), k=1),
    dict(verify="sample", drafters=("draft-model",), k=4, sampling=SamplingSettings(0.9, 0, 0.9)),
    dict(verify="sample", drafters=("prompt-lookup", "draft-model"), k=3, sampling=SamplingSettings(1.2, 20, 0.8)),
    dict(verify="asd", drafters=("draft-model",), k=4),
    dict(verify="sample", drafters=("draft-model",), k=4, repetition=RepetitionSettings(1.3, 3)),
    dict(verify="asd", drafters=("draft-model",), k=4, repetition=RepetitionSettings(1.3, 3)),
    dict(verify="greedy", drafters=("draft-model",), k=4, tree=12),
    dict(verify="sample", drafters=("draft-model",), k=3, tree=8, sampling=SamplingSettings(0.9, 0, 0.9),
         repetition=RepetitionSettings(1.3, 3)),
    dict(verify="sample", drafters=("prompt-lookup",), k=3, tree=8),
], ids=["greedy", "plain", "sample-top-p", "sample-one-hot-top-k-top-p", "asd", "sample-repetition",
        "asd-repetition", "greedy-tree", "sample-iid-tree-top-p-repetition", "sample-one-hot-tree"])
def test_whole_generations_use_no_float64_on_the_device(decoder, settings):
    passes, end = guarded(run, decoder, PROMPTS[1], max_new_tokens=24, seed=5, **settings)
    assert end.token_ids
    if settings["verify"] == "sample":  # the inspector's residual detail ran at least once
        assert any(p.detail.residual for p in passes)
    if settings["verify"] == "asd":
        assert any(t.regret is not None for p in passes for t in p.drafted)


def test_top_p_warping_and_asd_use_no_float64_on_the_device():
    z = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))  # (K+1, V)
    guarded(warp_probs, z, SamplingSettings(top_p=0.7))
    x = z[:4].topk(2).indices[:, 1]  # (K,) every draft the runner-up
    guarded(verify_asd, x, z.to(torch.bfloat16), 3.0, 1.0, 4)
