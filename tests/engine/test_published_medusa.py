"""Published Medusa heads (FasterDecoding) on a tiny random target, and ours exported in that format.

Checkpoints are written at test time in exactly the published layouts (tests/engine/published_checkpoints.py)
and checked against an independent reference forward written from FasterDecoding's MedusaModel.
"""

from __future__ import annotations

import pytest
import torch

from app.engine.core.sampling import TokenSampler
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.heads import TargetShape, build_module, default_config, save_head
from app.engine.drafters.published.detect import load_published
from app.engine.errors import DrafterCheckpointError, ModelLoadError
from app.engine.loading import load_models
from tests.engine.helpers import PROMPTS, run
from tests.engine.published_checkpoints import medusa_weights, reference_medusa_logits, write_medusa

HEADS = 3


@pytest.fixture(scope="module")
def bare(tiny_llama):
    return load_models(str(tiny_llama[0]), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def shape(bare):
    return TargetShape.of(bare.target, bare.num_layers)


def _last_hidden(models, ids: torch.Tensor) -> torch.Tensor:
    """The target's final normed hidden state at the last position it has seen (N-2), and the features list."""
    with torch.no_grad():
        states = models.target(ids[None], output_hidden_states=True).hidden_states
    return states[models.num_layers][0, :-1]  # (N-1, H)


def _ids(models, prompt: str) -> torch.Tensor:
    return torch.tensor(models.tokenizer(prompt)["input_ids"])


@pytest.mark.parametrize(("layers", "layout"), [(1, "pt"), (2, "safetensors"), (1, "full")])
def test_loaded_heads_match_the_reference_forward(bare, shape, tmp_path, tiny_llama, layers, layout):
    weights = medusa_weights(shape.hidden_size, shape.vocab_size, HEADS, layers, seed=layers)
    folder = write_medusa(tmp_path / "medusa", weights, HEADS, layers, str(tiny_llama[0]), layout)
    head = load_published("medusa", str(folder), bare)
    assert head.info.format == "Medusa (FasterDecoding)" and head.info.tap_layers == (bare.num_layers,)
    assert head.notices == []  # the declared verifier is the loaded target
    for prompt in PROMPTS:
        ids = _ids(bare, prompt)
        final = _last_hidden(bare, ids)
        draft = head.build(bare).propose(ids, HEADS, TokenSampler(None, torch.Generator()), [final])
        expected = reference_medusa_logits(weights, HEADS, layers, final[-1]).softmax(-1)  # (K, V)
        torch.testing.assert_close(draft.q, expected, atol=2e-5, rtol=1e-4)
        assert draft.tokens.tolist() == expected.argmax(-1).tolist()


def test_greedy_chains_and_trees_equal_the_target_alone(tiny_llama, shape, tmp_path_factory):
    folder = write_medusa(tmp_path_factory.mktemp("m") / "medusa",
                          medusa_weights(shape.hidden_size, shape.vocab_size, HEADS, 1, seed=5), HEADS, 1,
                          str(tiny_llama[0]))
    models = load_models(str(tiny_llama[0]), device="cpu", dtype="float32", drafters={"medusa": str(folder)})
    decoder = SpeculativeDecoder(models)
    for prompt in PROMPTS[:2]:
        _, reference = run(decoder, prompt, drafters=(), max_new_tokens=24)
        for k in (1, 3, 5):
            passes, end = run(decoder, prompt, drafters=("medusa",), k=k, max_new_tokens=24)
            assert end.token_ids == reference.token_ids
            assert {p.drafter for p in passes if p.k} == {"medusa"}
        for budget in (4, 16):
            _, end = run(decoder, prompt, drafters=("medusa",), k=3, tree=budget, max_new_tokens=24)
            assert end.token_ids == reference.token_ids


def _refusal(bare, folder) -> str:
    with pytest.raises(DrafterCheckpointError) as caught:
        load_published("medusa", str(folder), bare)
    assert isinstance(caught.value, ModelLoadError) and "\n" not in str(caught.value)
    return str(caught.value)


def test_a_hidden_size_or_vocabulary_mismatch_is_refused(bare, shape, tmp_path):
    wide = medusa_weights(2 * shape.hidden_size, shape.vocab_size, HEADS, 1, seed=1)
    message = _refusal(bare, write_medusa(tmp_path / "a", wide, HEADS, 1, "x"))
    assert f"hidden size {2 * shape.hidden_size}" in message
    other = medusa_weights(shape.hidden_size, shape.vocab_size + 3, HEADS, 1, seed=1)
    assert f"vocabulary of {shape.vocab_size + 3}" in _refusal(bare, write_medusa(tmp_path / "b", other, HEADS, 1, "x"))


def test_an_eagle_checkpoint_given_as_medusa_is_refused(bare, tmp_path):
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "config.json").write_text('{"speculators_model_type": "eagle3"}')
    assert "give it with --eagle" in _refusal(bare, tmp_path / "e")


# ---- ours, exported -------------------------------------------------------------------------------


def test_our_heads_exported_in_fasterdecodings_format_draft_the_same_tokens(bare, shape, tiny_llama, tmp_path):
    from tools.train.export_heads import main as export_main

    torch.manual_seed(0)
    config = default_config("medusa", shape, target_name=str(tiny_llama[0]), num_heads=HEADS)
    module = build_module(config)
    for parameter in module.parameters():  # trained-looking heads: not the zero start
        parameter.data.normal_(0, 0.2)
    (tmp_path / "heads" / "medusa").mkdir(parents=True)
    save_head(tmp_path / "heads" / "medusa", config, module)
    assert export_main(["--target", str(tiny_llama[0]), "--heads", str(tmp_path / "heads"), "--out",
                        str(tmp_path / "out")]) == 0
    assert {p.name for p in (tmp_path / "out" / "medusa").iterdir()} == {"config.json", "medusa_lm_head.pt"}
    ours = load_models(str(tiny_llama[0]), device="cpu", dtype="float32", heads=str(tmp_path / "heads"))
    exported = load_published("medusa", str(tmp_path / "out" / "medusa"), bare)
    sampler = TokenSampler(None, torch.Generator())
    for prompt in PROMPTS:
        ids = _ids(bare, prompt)
        features = [_last_hidden(bare, ids)]
        original = ours.heads["medusa"].build(ours).propose(ids, HEADS, sampler, features)
        again = exported.build(bare).propose(ids, HEADS, sampler, features)
        assert again.tokens.tolist() == original.tokens.tolist()
        torch.testing.assert_close(again.q, original.q, atol=1e-6, rtol=1e-5)
