"""An MTP layer shipped inside a target's checkpoint (DeepSeek-V3 / GLM, MiMo and Qwen3-Next layouts), on a tiny
random Llama target."""

from __future__ import annotations

import json

import pytest
import torch

from app.engine.core.sampling import TokenSampler
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.published.detect import load_published
from app.engine.drafters.published.formats import MTP, kind_of
from app.engine.errors import DrafterCheckpointError
from app.engine.loading import load_models
from tests.engine.helpers import PROMPTS, run
from tests.engine.published_checkpoints import ReferenceMtp, write_mtp_target

HIDDEN = 64


@pytest.fixture(scope="module")
def mtp_target(tmp_path_factory):
    return write_mtp_target(tmp_path_factory.mktemp("mtp"), hidden=HIDDEN)


@pytest.fixture(scope="module")
def models(mtp_target):
    return load_models(str(mtp_target[0]), device="cpu", dtype="float32", drafters={"mtp": str(mtp_target[0])})


def test_the_mtp_layer_matches_the_reference_forward(models, mtp_target):
    folder, weights = mtp_target
    spec = models.heads["mtp"]
    assert spec.info.tap_layers == (models.num_layers,) and spec.config.feature_layers == (models.num_layers,)
    eps = json.loads((folder / "config.json").read_text()).get("rms_norm_eps", 1e-6)
    assert_drafts_as(ReferenceMtp(weights, HIDDEN, models.vocab_size, eps), models, PROMPTS)


def test_mimos_layout_matches_its_reference_forward(tmp_path):
    folder, weights = write_mtp_target(tmp_path, hidden=HIDDEN, mimo=True)
    models = load_models(str(folder), device="cpu", dtype="float32", drafters={"mtp": str(folder)})
    eps = json.loads((folder / "config.json").read_text()).get("rms_norm_eps", 1e-6)
    reference = ReferenceMtp(weights, HIDDEN, models.vocab_size, eps, models.target.get_output_embeddings().weight)
    assert_drafts_as(reference, models, PROMPTS[:1])


def assert_drafts_as(reference: ReferenceMtp, models, prompts) -> None:
    """The loaded MTP drafter's 3-token chains and their distributions are the reference forward's."""
    for prompt in prompts:
        ids = torch.tensor(models.tokenizer(prompt)["input_ids"])
        with torch.no_grad():
            states = models.target(ids[None], output_hidden_states=True).hidden_states
        draft = models.heads["mtp"].build(models).propose(ids, 3, TokenSampler(None, torch.Generator()),
                                                          [states[models.num_layers][0, :-1]])
        tokens, logits = reference.chain(models.target, ids, 3)
        assert draft.tokens.tolist() == tokens
        torch.testing.assert_close(draft.q, torch.stack(logits).softmax(-1), atol=2e-5, rtol=1e-4)


def test_qwen3_nexts_layout_matches_its_reference_forward(tmp_path):
    folder, weights = write_mtp_target(tmp_path, hidden=HIDDEN, qwen=True)
    models = load_models(str(folder), device="cpu", dtype="float32", drafters={"mtp": str(folder)})
    assert models.heads["mtp"].info.format == MTP
    eps = json.loads((folder / "config.json").read_text()).get("rms_norm_eps", 1e-6)
    reference = ReferenceMtp(weights, HIDDEN, models.vocab_size, eps, models.target.get_output_embeddings().weight,
                             qwen=True)
    assert_drafts_as(reference, models, PROMPTS[:2])
    decoder = SpeculativeDecoder(models)
    _, alone = run(decoder, PROMPTS[0], drafters=(), max_new_tokens=12)
    _, drafted = run(decoder, PROMPTS[0], drafters=("mtp",), k=3, max_new_tokens=12)
    assert drafted.token_ids == alone.token_ids


def test_qwen35s_nested_count_is_read_and_two_layers_are_refused(tmp_path):
    folder, _ = write_mtp_target(tmp_path, hidden=HIDDEN, qwen=True)
    config = json.loads((folder / "config.json").read_text())
    assert kind_of({"text_config": {"mtp_num_hidden_layers": 1}}) == "mtp"
    config["mtp_num_hidden_layers"] = 2
    (folder / "config.json").write_text(json.dumps(config))
    models = load_models(str(folder), device="cpu", dtype="float32")
    with pytest.raises(DrafterCheckpointError) as caught:
        load_published("mtp", str(folder), models)
    assert "\n" not in str(caught.value) and "has 2 MTP layers" in str(caught.value)


def test_greedy_chains_equal_the_target_alone(models):
    decoder = SpeculativeDecoder(models)
    for prompt in PROMPTS[:2]:
        _, reference = run(decoder, prompt, drafters=(), max_new_tokens=16)
        for k in (1, 3):
            passes, end = run(decoder, prompt, drafters=("mtp",), k=k, max_new_tokens=16)
            assert end.token_ids == reference.token_ids
            assert {p.drafter for p in passes if p.k} == {"mtp"}


def test_another_targets_mtp_layer_is_refused_or_noticed(models, tiny_llama, mtp_target, tmp_path):
    shallower, _ = write_mtp_target(tmp_path, layers=3, hidden=HIDDEN)
    with pytest.raises(DrafterCheckpointError) as caught:
        load_published("mtp", str(shallower), models)
    message = str(caught.value)
    assert "\n" not in message and "3 layers" in message and "load the target whose checkpoint this is" in message
    same_shape = load_models(str(tiny_llama[0]), device="cpu", dtype="float32")
    spec = load_published("mtp", str(mtp_target[0]), same_shape)
    assert len(spec.notices) == 1 and str(mtp_target[0]) in spec.notices[0]
    assert models.heads["mtp"].notices == []  # its own checkpoint: nothing to say
