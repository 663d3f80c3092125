"""Published EAGLE-1/2 checkpoints (SafeAILab/EAGLE cnets1.py layout), told from EAGLE-3's by their keys."""

from __future__ import annotations

import pytest
import torch

from app.engine.core.sampling import TokenSampler
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.published.detect import load_published
from app.engine.errors import DrafterCheckpointError
from app.engine.loading import load_models
from tests.engine.helpers import PROMPTS, run
from tests.engine.published_checkpoints import ReferenceEagle1, eagle1_weights, write_eagle1

HIDDEN = 64


@pytest.fixture(scope="module")
def bare(tiny_llama):
    return load_models(str(tiny_llama[0]), device="cpu", dtype="float32")


@pytest.mark.parametrize("own_embeddings", [False, True])
def test_loaded_drafter_matches_the_reference_forward(bare, tmp_path, own_embeddings):
    weights = eagle1_weights(HIDDEN, bare.vocab_size, seed=3, own_embeddings=own_embeddings)
    head = load_published("eagle", str(write_eagle1(tmp_path / "eagle1", weights, HIDDEN, bare.vocab_size)), bare)
    assert head.info.format == "EAGLE-1/2 (SafeAILab)" and head.config.feature_layers == (bare.num_layers,)
    reference = ReferenceEagle1(weights, HIDDEN, bare.vocab_size, bare.target.get_output_embeddings().weight)
    for prompt in PROMPTS:
        ids = torch.tensor(bare.tokenizer(prompt)["input_ids"])
        with torch.no_grad():
            states = bare.target(ids[None], output_hidden_states=True).hidden_states
        draft = head.build(bare).propose(ids, 4, TokenSampler(None, torch.Generator()),
                                         [states[bare.num_layers][0, :-1]])
        tokens, logits = reference.chain(bare.target, ids, 4)
        assert draft.tokens.tolist() == tokens
        torch.testing.assert_close(draft.q, torch.stack(logits).softmax(-1), atol=2e-5, rtol=1e-4)


def test_greedy_chains_and_trees_equal_the_target_alone(tiny_llama, tmp_path_factory):
    folder = write_eagle1(tmp_path_factory.mktemp("e1") / "eagle1", eagle1_weights(HIDDEN, 384, seed=4,
                                                                                   own_embeddings=False), HIDDEN, 384)
    models = load_models(str(tiny_llama[0]), device="cpu", dtype="float32", drafters={"eagle": str(folder)})
    assert models.vocab_size == 384  # the tiny tokenizer's vocabulary, which the checkpoint was written for
    decoder = SpeculativeDecoder(models)
    for prompt in PROMPTS[:2]:
        _, reference = run(decoder, prompt, drafters=(), max_new_tokens=20)
        for options in (dict(k=1), dict(k=4), dict(k=4, tree=12)):
            _, end = run(decoder, prompt, drafters=("eagle",), max_new_tokens=20, **options)
            assert end.token_ids == reference.token_ids


def test_a_hidden_size_mismatch_is_refused_in_one_line(bare, tmp_path):
    folder = write_eagle1(tmp_path / "wide", eagle1_weights(2 * HIDDEN, bare.vocab_size, seed=5,
                                                            own_embeddings=False), 2 * HIDDEN, bare.vocab_size)
    with pytest.raises(DrafterCheckpointError) as caught:
        load_published("eagle", str(folder), bare)
    assert "EAGLE-1/2 drafter of hidden size 128" in str(caught.value) and "\n" not in str(caught.value)
