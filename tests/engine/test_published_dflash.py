"""Published DFlash block drafters (z-lab/dflash), on a tiny random Llama target."""

from __future__ import annotations

import json

import pytest
import torch

from app.engine.core.sampling import TokenSampler
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.published.detect import load_published
from app.engine.drafters.published.formats import DFLASH, dflash_taps
from app.engine.errors import DrafterCheckpointError
from app.engine.loading import load_models
from tests.engine.helpers import PROMPTS, run
from tests.engine.published_checkpoints import ReferenceDFlash, dflash_weights, tiny_target, write_dflash

HIDDEN, LAYERS, TARGET_LAYERS, BLOCK, IDS = 64, 2, 8, 4, [1, 3, 5]


@pytest.fixture(scope="module")
def target_folder(tmp_path_factory):
    return tiny_target(tmp_path_factory.mktemp("dflash_target"), layers=TARGET_LAYERS, hidden=HIDDEN)


@pytest.fixture(scope="module")
def bare(target_folder):
    return load_models(str(target_folder), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, bare):
    weights = dflash_weights(HIDDEN, LAYERS, len(IDS), seed=5)
    folder = write_dflash(tmp_path_factory.mktemp("dflash") / "ckpt", weights, HIDDEN, bare.vocab_size, LAYERS, IDS,
                          BLOCK, bare.vocab_size - 1, TARGET_LAYERS)
    return folder, weights


def test_loaded_drafter_matches_the_reference_forward(bare, checkpoint):
    folder, weights = checkpoint
    spec = load_published("dflash", str(folder), bare)
    assert spec.info.format == DFLASH and spec.info.tap_layers == (2, 4, 6) == spec.config.feature_layers
    reference = ReferenceDFlash(weights, LAYERS, IDS, BLOCK, bare.vocab_size - 1)
    for prompt in PROMPTS[:2]:
        ids = torch.tensor(bare.tokenizer(prompt)["input_ids"])
        with torch.no_grad():
            states = bare.target(ids[None], output_hidden_states=True).hidden_states
        features = [states[i][0, :-1] for i in spec.config.feature_layers]
        draft = spec.build(bare).propose(ids, 5, TokenSampler(None, torch.Generator()), features)
        logits = reference.block_logits(bare.target, ids)  # (bs-1, V)
        assert draft.tokens.tolist() == logits.argmax(-1).tolist()  # K > bs-1 gives bs-1 drafts
        torch.testing.assert_close(draft.q, logits.softmax(-1), atol=2e-5, rtol=1e-4)


def test_taps_follow_target_layer_ids_order_and_the_default_spread():
    assert dflash_taps({"dflash_config": {"target_layer_ids": [5, 1, 3]}}, 8) == (6, 2, 4)
    # build_target_layer_ids(36, 5) = [1, 9, 17, 25, 33], read one layer later
    assert dflash_taps({"dflash_config": {}, "num_hidden_layers": 5, "num_target_layers": 36}, None) == \
        (2, 10, 18, 26, 34)
    assert dflash_taps({"dflash_config": {}, "num_hidden_layers": 1}, 8) == (5,)


def test_greedy_chains_and_trees_equal_the_target_alone(target_folder, checkpoint):
    models = load_models(str(target_folder), device="cpu", dtype="float32", drafters={"dflash": str(checkpoint[0])})
    decoder = SpeculativeDecoder(models)
    for prompt in PROMPTS[:2]:
        _, alone = run(decoder, prompt, drafters=(), max_new_tokens=16)
        for settings in ({"k": 2}, {"k": 5}, {"k": 3, "tree": 6}):
            passes, end = run(decoder, prompt, drafters=("dflash",), max_new_tokens=16, **settings)
            assert end.token_ids == alone.token_ids
            assert {p.drafter for p in passes if p.k} == {"dflash"}


@pytest.mark.parametrize("change, words", [
    ({"hidden_size": 32}, "hidden size 32"),
    ({"vocab_size": 7}, "vocabulary 7"),
    ({"dflash_config": {"mask_token_id": 10 ** 6, "target_layer_ids": IDS}}, "mask token id"),
    ({"dflash_config": {"mask_token_id": 0, "target_layer_ids": [1, 3, TARGET_LAYERS]}}, "taps"),
    ({"layer_types": ["sliding_attention", "full_attention"]}, "sliding-window"),
])
def test_a_checkpoint_for_another_target_is_refused_in_one_line(bare, checkpoint, tmp_path, change, words):
    folder, weights = checkpoint
    other = write_dflash(tmp_path / "other", weights, HIDDEN, bare.vocab_size, LAYERS, IDS, BLOCK, 0, TARGET_LAYERS)
    config = json.loads((other / "config.json").read_text()) | change
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(DrafterCheckpointError) as caught:
        load_published("dflash", str(other), bare)
    assert "\n" not in str(caught.value) and words in str(caught.value) and "DFlash" in str(caught.value)
    assert "give the DFlash checkpoint" in str(caught.value) or "all attend in full" in str(caught.value)


def test_a_dflash_checkpoint_given_for_eagle_is_refused(bare, checkpoint):
    with pytest.raises(DrafterCheckpointError, match="give it with --dflash"):
        load_published("eagle", str(checkpoint[0]), bare)
