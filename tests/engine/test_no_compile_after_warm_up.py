"""After the load-time warm-up, no generation compiles anything (issue: EAGLE broke the compiled path).

A compiled target that a drafter asks for hidden states (EAGLE, DFlash, MTP read its features) used to meet a
second graph per row bucket at its first verification, compiled in the middle of a generation: minutes on a
real model. The compiled forward now always returns the hidden states, so the load compiles every graph a
generation meets. Here every drafter (learned heads included), chains of K 1..16, trees of 4, 16 and 64 nodes,
adaptive K, the sample rule and ASD run after a compiling load, and dynamo's frame count must not move.
Dynamo traces with a counting backend that runs the graphs eagerly, so nothing is compiled for real.
"""

from __future__ import annotations

import pytest
import torch

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.heads import FAMILIES, TargetShape, build_module, default_config, save_head
from app.engine.drafters.registry import BRANCHING_DRAFTERS
from app.engine.events import EndEvent, NoticeEvent
from app.engine.loading import load_models
from app.engine.settings import DecodeSettings, SamplingSettings
from tests.engine.conftest import compiles_counted
from tests.engine.helpers import PROMPTS
from tests.tiny_models import tiny_pair

TREES = (4, 16, 64)


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """A tiny target and draft model whose greedy runs never end early, with random heads of every family."""
    root = tmp_path_factory.mktemp("no-compile")
    target, draft = tiny_pair(root, "llama", mute_eos=True)
    models = load_models(str(target), str(draft), device="cpu")
    shape = TargetShape.of(models.target, models.num_layers)
    for name in FAMILIES:
        (root / "heads" / name).mkdir(parents=True)
        config = default_config(name, shape, "tiny target")
        torch.manual_seed(0)
        save_head(root / "heads" / name, config, build_module(config))
    return target, draft, root / "heads"


@pytest.fixture(scope="module")
def compiled(family):
    """(decoder of a compiling load, dynamo's frame counter)."""
    with compiles_counted() as counter:
        target, draft, heads = family
        models = load_models(str(target), str(draft), device="cpu", compile=True, heads=str(heads))
        yield SpeculativeDecoder(models), counter


def every_generation(drafters: tuple[str, ...]) -> list[DecodeSettings]:
    """What a user can ask of the compiled models, one generation each."""
    runs = [DecodeSettings(drafters=(), max_new_tokens=6)]
    runs += [DecodeSettings(drafters=(name,), k=4, max_new_tokens=16) for name in drafters]
    runs += [DecodeSettings(drafters=("draft-model",), k=k, max_new_tokens=2 * k + 2) for k in range(1, 17)]
    runs += [DecodeSettings(drafters=(name,), k=8, tree=nodes, max_new_tokens=20)
             for name in drafters if name in BRANCHING_DRAFTERS for nodes in TREES]
    runs += [DecodeSettings(drafters=(name,), adaptive_k=True, k=4, k_max=16, max_new_tokens=40)
             for name in ("draft-model", "eagle")]
    sampled = SamplingSettings(temperature=0.8, top_k=50)
    runs += [DecodeSettings(drafters=(name,), k=5, verify="sample", sampling=sampled, seed=3, max_new_tokens=16)
             for name in drafters]
    runs += [DecodeSettings(drafters=(name,), k=6, verify="asd", max_new_tokens=24)
             for name in ("draft-model", "eagle", "prompt-lookup")]
    return runs


@pytest.mark.slow
def test_no_generation_compiles_anything_after_the_load(compiled):
    decoder, counter = compiled
    drafters = decoder.models.available_drafters
    assert set(FAMILIES) <= set(drafters) and {"draft-model", "layer-skip"} <= set(drafters)
    at_load = counter.frame_count
    assert at_load > 0
    for settings in every_generation(drafters):
        decoder.forget_caches()
        events = list(decoder.generate(PROMPTS[1], settings))
        end = events[-1]
        assert isinstance(end, EndEvent) and end.reason == "max_tokens", (settings, getattr(end, "error", end))
        assert not [e.message for e in events if isinstance(e, NoticeEvent)], settings
        assert counter.frame_count == at_load, f"compiled during {settings}"
    assert decoder.models.execution.compile_failure is None
