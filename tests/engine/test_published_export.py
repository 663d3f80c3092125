"""Ours in the field's formats: an EAGLE head with EAGLE-3's layer (tools.train.heads --eagle-layout eagle3) trains
with the playground's unrolled steps, drafts like the target's other drafters, and `tools.train.export_heads` writes
it as a speculators checkpoint that loads back (as vLLM would read it) and drafts exactly the same tokens."""

from __future__ import annotations

import json

import pytest
import torch

from app.engine.core.sampling import TokenSampler
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.heads import TargetShape, build_module, default_config, eagle, save_head
from app.engine.drafters.heads.common import TargetParts
from app.engine.drafters.published.detect import load_published
from app.engine.loading import load_models
from tests.engine.helpers import PROMPTS, run
from tests.engine.published_checkpoints import tiny_target

LAYERS = 8


@pytest.fixture(scope="module")
def target_folder(tmp_path_factory):
    return tiny_target(tmp_path_factory.mktemp("export-target"), layers=LAYERS)


@pytest.fixture(scope="module")
def heads(target_folder, tmp_path_factory):
    """A heads folder with one EAGLE head of EAGLE-3's layer, weights drawn away from their start."""
    bare = load_models(str(target_folder), device="cpu", dtype="float32")
    shape = TargetShape.of(bare.target, bare.num_layers)
    config = default_config("eagle", shape, target_name=str(target_folder), layout="eagle3", intermediate=96)
    module = build_module(config)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in module.parameters():
            scale = 0.1 if parameter.dim() == 1 else 1 / parameter.shape[-1] ** 0.5
            base = 1.0 if parameter.dim() == 1 else 0.0
            parameter.copy_(base + scale * torch.randn(parameter.shape, generator=generator))
    folder = tmp_path_factory.mktemp("ours") / "heads"
    (folder / "eagle").mkdir(parents=True)
    save_head(folder / "eagle", config, module)
    return folder


@pytest.fixture(scope="module")
def ours(target_folder, heads):
    return load_models(str(target_folder), device="cpu", dtype="float32", heads=str(heads))


def test_the_eagle3_layer_reads_eagle3s_taps_and_trains_with_the_unrolled_steps(ours):
    spec = ours.heads["eagle"]
    assert spec.config.feature_layers == (2, LAYERS // 2, LAYERS - 3)
    module = build_module(spec.config).train()
    tokens = torch.tensor([ours.tokenizer(p)["input_ids"][:12] for p in PROMPTS])  # (B, T)
    with torch.no_grad():
        states = ours.target(tokens, output_hidden_states=True).hidden_states
    features = [states[i] for i in spec.config.feature_layers]
    outputs = eagle.unrolled_outputs(module, TargetParts.of(ours.target), tokens, features, 3)
    loss = sum(TargetParts.of(ours.target).logits(module.out_norm(o)).logsumexp(-1).mean() for o in outputs)
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())


def test_greedy_chains_and_trees_of_the_eagle3_layer_equal_the_target_alone(ours):
    decoder = SpeculativeDecoder(ours)
    for prompt in PROMPTS[:2]:
        _, reference = run(decoder, prompt, drafters=(), max_new_tokens=20)
        for options in (dict(k=4), dict(k=4, tree=12)):
            _, end = run(decoder, prompt, drafters=("eagle",), max_new_tokens=20, **options)
            assert end.token_ids == reference.token_ids


def test_the_speculators_export_drafts_exactly_the_same_tokens(ours, target_folder, heads, tmp_path):
    from tools.train.export_heads import main as export_main

    assert export_main(["--target", str(target_folder), "--heads", str(heads), "--out", str(tmp_path)]) == 0
    config = json.loads((tmp_path / "eagle" / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["eagle_aux_hidden_state_layer_ids"] == [2, LAYERS // 2, LAYERS - 3]
    assert config["speculators_config"]["verifier"]["name_or_path"] == str(target_folder)
    exported = load_published("eagle", str(tmp_path / "eagle"), ours)
    assert exported.info.format == "EAGLE-3 (speculators)" and exported.notices == []
    mine = ours.heads["eagle"]
    for prompt in PROMPTS:
        ids = torch.tensor(ours.tokenizer(prompt)["input_ids"])
        with torch.no_grad():
            states = ours.target(ids[None], output_hidden_states=True).hidden_states
        features = [states[i][0, :-1] for i in mine.config.feature_layers]
        sampler = TokenSampler(None, torch.Generator())
        original = mine.build(ours).propose(ids, 5, sampler, features)
        again = exported.build(ours).propose(ids, 5, sampler, features)
        assert again.tokens.tolist() == original.tokens.tolist()
        torch.testing.assert_close(again.q, original.q, atol=1e-6, rtol=1e-5)
        tree, tree_again = (spec.build(ours).propose_tree(ids, 3, 10, sampler, features) for spec in (mine, exported))
        assert tree_again.tokens.tolist() == tree.tokens.tolist()
        assert tree_again.parents.tolist() == tree.parents.tolist()
