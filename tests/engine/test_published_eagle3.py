"""Published EAGLE-3 checkpoints (SafeAILab / SpecForge and vLLM's speculators layouts) on a tiny random target.

The checkpoints are written at test time in exactly the published layouts (tests/engine/published_checkpoints.py)
and checked against an independent reference forward written from the published model code.
"""

from __future__ import annotations

import pytest
import torch

from app.engine.core.sampling import TokenSampler
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.published.detect import load_published
from app.engine.errors import DrafterCheckpointError, ModelLoadError
from app.engine.loading import load_models
from app.engine.settings import SamplingSettings
from tests.engine.helpers import PROMPTS, run
from tests.engine.published_checkpoints import (
    ReferenceEagle3,
    eagle3_weights,
    tiny_target,
    vocab_map,
    write_specforge,
    write_speculators,
)

HIDDEN, LAYERS, DRAFT_VOCAB = 64, 8, 200
DEFAULT_TAPS = (2, LAYERS // 2, LAYERS - 3)


@pytest.fixture(scope="module")
def target_folder(tmp_path_factory):
    return tiny_target(tmp_path_factory.mktemp("eagle3-target"), layers=LAYERS, hidden=HIDDEN)


@pytest.fixture(scope="module")
def bare(target_folder):
    """The target alone (no draft model, no heads), as a user's own target loads."""
    return load_models(str(target_folder), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def vocab(bare):
    return bare.vocab_size


@pytest.fixture(scope="module")
def specforge(tmp_path_factory, vocab):
    """A SpecForge checkpoint with a reduced draft vocabulary: (folder, weights, target ids)."""
    d2t, t2d = vocab_map(vocab, DRAFT_VOCAB, seed=1)
    weights = eagle3_weights(HIDDEN, vocab, DRAFT_VOCAB, seed=2, own_embeddings=False)
    folder = write_specforge(tmp_path_factory.mktemp("specforge") / "eagle3", {**weights, "d2t": d2t, "t2d": t2d},
                             HIDDEN, vocab, DRAFT_VOCAB)
    return folder, weights, torch.arange(DRAFT_VOCAB) + d2t


@pytest.fixture(scope="module")
def speculators(tmp_path_factory, vocab, target_folder):
    """A speculators checkpoint (own embed_tokens, norm_before_residual) naming the target as its verifier."""
    d2t, t2d = vocab_map(vocab, DRAFT_VOCAB, seed=4)
    weights = eagle3_weights(HIDDEN, vocab, DRAFT_VOCAB, seed=5, own_embeddings=True)
    folder = write_speculators(tmp_path_factory.mktemp("speculators") / "eagle3",
                               {**weights, "d2t": d2t, "t2d": t2d}, HIDDEN, vocab, DRAFT_VOCAB,
                               verifier=str(target_folder), norm_before_residual=True)
    return folder, weights, torch.arange(DRAFT_VOCAB) + d2t


@pytest.fixture(scope="module")
def models(target_folder, specforge):
    return load_models(str(target_folder), device="cpu", dtype="float32", drafters={"eagle": str(specforge[0])})


def _features(models, ids: torch.Tensor, layers) -> list[torch.Tensor]:
    with torch.no_grad():
        states = models.target(ids[None], output_hidden_states=True).hidden_states
    return [states[i][0, :-1] for i in layers]  # the committed tokens but the last


def _prompt_ids(models, prompt: str = PROMPTS[0]) -> torch.Tensor:
    return torch.tensor(models.tokenizer(prompt)["input_ids"])


# ---- the loaded drafter is the published model --------------------------------------------------


@pytest.mark.parametrize("layout", ["specforge", "speculators"])
def test_loaded_drafter_matches_the_reference_forward(bare, layout, specforge, speculators):
    folder, weights, target_ids = specforge if layout == "specforge" else speculators
    head = load_published("eagle", str(folder), bare)
    assert head.config.feature_layers == DEFAULT_TAPS
    reference = ReferenceEagle3(weights, HIDDEN, DEFAULT_TAPS, target_ids, bare.vocab_size,
                                norm_before_residual=layout == "speculators")
    for prompt in PROMPTS:
        ids = _prompt_ids(bare, prompt)
        draft = head.build(bare).propose(ids, 4, TokenSampler(None, torch.Generator()),
                                         _features(bare, ids, head.config.feature_layers))
        tokens, logits = reference.chain(bare.target, ids, 4)
        assert draft.tokens.tolist() == tokens
        expected = torch.stack(logits).softmax(-1)  # (K, V): greedy q is the plain softmax
        torch.testing.assert_close(draft.q, expected, atol=2e-5, rtol=1e-4)


def test_reduced_draft_vocabulary_drafts_only_mapped_target_ids(bare, specforge):
    folder, _, target_ids = specforge
    head = load_published("eagle", str(folder), bare)
    mapped = set(target_ids.tolist())
    for prompt in PROMPTS:
        ids = _prompt_ids(bare, prompt)
        features = _features(bare, ids, head.config.feature_layers)
        for seed in range(5):
            sampling = None if seed == 0 else SamplingSettings()  # greedy, then sampled drafts
            sampler = TokenSampler(sampling, torch.Generator().manual_seed(seed))
            draft = head.build(bare).propose(ids, 5, sampler, features)
            assert set(draft.tokens.tolist()) <= mapped
            unmapped = torch.ones(bare.vocab_size, dtype=torch.bool)
            unmapped[target_ids] = False
            assert float(draft.q[:, unmapped].abs().max()) == 0.0  # probability exactly 0 off the map


def test_declared_tap_ids_follow_each_layouts_convention(bare, tmp_path, vocab, target_folder):
    """speculators' ids are the layers whose input is taken (vLLM); SpecForge's name layer outputs (SGLang +1)."""
    weights = eagle3_weights(HIDDEN, vocab, vocab, seed=6, own_embeddings=True)
    spec = load_published("eagle", str(write_speculators(tmp_path / "s", weights, HIDDEN, vocab, vocab,
                                                         str(target_folder), aux_ids=[1, 3, 5])), bare)
    forge = load_published("eagle", str(write_specforge(tmp_path / "f", weights, HIDDEN, vocab, vocab,
                                                        aux_ids=[5, 1, 3], safetensors=True)), bare)
    assert spec.config.feature_layers == (1, 3, 5)
    assert forge.config.feature_layers == (2, 4, 6)
    assert spec.info.draft_vocab_size == vocab and spec.info.verifier == str(target_folder)


# ---- greedy identity with the target -------------------------------------------------------------


@pytest.fixture(scope="module")
def decoder(models):
    return SpeculativeDecoder(models)


def test_greedy_chains_and_trees_equal_the_target_alone(decoder, models):
    assert "eagle" in models.available_drafters
    for prompt in PROMPTS:
        _, reference = run(decoder, prompt, drafters=(), max_new_tokens=24)
        for k in (1, 4):
            passes, end = run(decoder, prompt, drafters=("eagle",), k=k, max_new_tokens=24)
            assert end.token_ids == reference.token_ids
            assert {p.drafter for p in passes if p.k} == {"eagle"}
        for budget in (6, 24):
            _, end = run(decoder, prompt, drafters=("eagle",), k=4, tree=budget, max_new_tokens=24)
            assert end.token_ids == reference.token_ids


def test_another_verifier_name_is_a_notice_not_a_refusal(bare, tmp_path, vocab):
    weights = eagle3_weights(HIDDEN, vocab, vocab, seed=7, own_embeddings=True)
    folder = write_speculators(tmp_path / "other", weights, HIDDEN, vocab, vocab, "meta-llama/Llama-3.1-8B-Instruct")
    head = load_published("eagle", str(folder), bare)
    assert len(head.notices) == 1 and "meta-llama/Llama-3.1-8B-Instruct" in head.notices[0]
    assert head.notices[0] in bare.execution.notices


# ---- refusals: one line each, a typed error that says what to do -----------------------------------


def _refusal(bare, folder) -> str:
    with pytest.raises(DrafterCheckpointError) as caught:
        load_published("eagle", str(folder), bare)
    assert isinstance(caught.value, ModelLoadError)  # the window shows load errors as messages
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_wrong_d2t_is_refused(bare, tmp_path, vocab):
    d2t, t2d = vocab_map(vocab, DRAFT_VOCAB, seed=1)
    weights = eagle3_weights(HIDDEN, vocab, DRAFT_VOCAB, seed=2, own_embeddings=False)
    shifted = d2t + vocab  # maps beyond the target vocabulary: a map of another tokenizer
    message = _refusal(bare, write_specforge(tmp_path / "a", {**weights, "d2t": shifted, "t2d": t2d}, HIDDEN,
                                             vocab, DRAFT_VOCAB))
    assert "d2t" in message and "saved with this checkpoint" in message
    other_d2t, _ = vocab_map(vocab, DRAFT_VOCAB, seed=9)  # a regenerated map that disagrees with t2d
    message = _refusal(bare, write_specforge(tmp_path / "b", {**weights, "d2t": other_d2t, "t2d": t2d}, HIDDEN,
                                             vocab, DRAFT_VOCAB))
    assert "disagree" in message


def test_a_full_vocabulary_checkpoint_with_cnets_untouched_maps_loads(bare, tmp_path, vocab):
    """SafeAILab's cnets.py registers d2t (V_d,) and t2d (V,) as zeros and ignores both when V_d = V, so a
    full-vocabulary checkpoint carries them unset: it drafts the target's ids as one without maps does."""
    weights = eagle3_weights(HIDDEN, vocab, vocab, seed=4, own_embeddings=False)
    untouched = {"d2t": torch.zeros(vocab, dtype=torch.long), "t2d": torch.zeros(vocab, dtype=torch.bool)}
    with_maps = load_published("eagle", str(write_specforge(tmp_path / "m", {**weights, **untouched}, HIDDEN, vocab,
                                                            vocab)), bare)
    without = load_published("eagle", str(write_specforge(tmp_path / "n", weights, HIDDEN, vocab, vocab)), bare)
    hidden = torch.randn(3, HIDDEN, generator=torch.Generator().manual_seed(0))
    assert with_maps.parts.logits(hidden).shape == (3, vocab)
    torch.testing.assert_close(with_maps.parts.logits(hidden), without.parts.logits(hidden))


def test_a_missing_t2d_is_refused(bare, tmp_path, vocab):
    d2t, _ = vocab_map(vocab, DRAFT_VOCAB, seed=1)
    weights = eagle3_weights(HIDDEN, vocab, DRAFT_VOCAB, seed=2, own_embeddings=False)
    message = _refusal(bare, write_specforge(tmp_path / "c", {**weights, "d2t": d2t}, HIDDEN, vocab, DRAFT_VOCAB))
    assert "no t2d" in message


def test_a_tap_layer_beyond_the_target_is_refused(bare, tmp_path, vocab, target_folder):
    weights = eagle3_weights(HIDDEN, vocab, vocab, seed=6, own_embeddings=True)
    folder = write_speculators(tmp_path / "d", weights, HIDDEN, vocab, vocab, str(target_folder),
                               aux_ids=[2, 16, 29])  # Llama-3.1-8B's taps on an 8-layer target
    message = _refusal(bare, folder)
    assert "[2, 16, 29]" in message and f"{LAYERS} layers" in message


def test_a_hidden_size_mismatch_is_refused(bare, tmp_path, vocab):
    weights = eagle3_weights(2 * HIDDEN, vocab, vocab, seed=8, own_embeddings=False)
    message = _refusal(bare, write_specforge(tmp_path / "e", weights, 2 * HIDDEN, vocab, vocab))
    assert f"size {2 * HIDDEN}" in message and f"are {HIDDEN}" in message


def test_a_vocabulary_mismatch_and_a_foreign_format_are_refused(bare, tmp_path, vocab):
    weights = eagle3_weights(HIDDEN, vocab + 8, vocab + 8, seed=8, own_embeddings=False)
    assert "vocabulary of" in _refusal(bare, write_specforge(tmp_path / "f", weights, HIDDEN, vocab + 8, vocab + 8))
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "config.json").write_text('{"model_type": "llama"}')
    assert "not a drafter checkpoint" in _refusal(bare, tmp_path / "g")


# ---- the command line ----------------------------------------------------------------------------


def _jsonl(capsys, argv: list[str]) -> list[dict]:
    import json

    from app import cli

    assert cli.main(argv) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]


def test_run_takes_a_checkpoint_with_eagle_and_keeps_the_targets_output(capsys, target_folder, specforge):
    common = ["run", "--jsonl", "--target", str(target_folder), "--device", "cpu", "--prompt", PROMPTS[1],
              "--max-new-tokens", "16", "--seed", "1"]
    alone = _jsonl(capsys, [*common, "--drafter", "none"])[-1]
    lines = _jsonl(capsys, [*common, "--eagle", str(specforge[0]), "--drafter", "eagle", "--k", "3"])
    drafted, passes = lines[-1], [line for line in lines if "drafted" in line]
    assert drafted["type"] == alone["type"] == "end"
    assert drafted["token_ids"] == alone["token_ids"]
    assert {p["drafter"] for p in passes if p["k"]} == {"eagle"} and len(passes[0]["drafted"]) == 3


def test_run_refuses_a_missing_checkpoint_folder_before_loading(capsys, tmp_path):
    from app import cli

    with pytest.raises(SystemExit):
        cli.main(["run", "--prompt", "x", "--eagle", str(tmp_path / "nowhere")])
    assert "--eagle: drafter checkpoint folder" in capsys.readouterr().err


def test_a_hub_id_is_downloaded_with_progress_like_a_model(monkeypatch, bare, specforge):
    """Offline: the hub download is replaced by one that counts bytes through the progress class it is given."""
    import huggingface_hub

    asked, reports = {}, []

    def download(repo_id, allow_patterns, tqdm_class):
        asked.update(repo_id=repo_id, patterns=allow_patterns)
        bar = tqdm_class(total=2 * 2**20, unit="B")
        bar.update(2**20)
        bar.update(2**20)
        return str(specforge[0])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    head = load_published("eagle", "some-org/EAGLE3-tiny", bare, lambda fraction, message: reports.append(
        (fraction, message)))
    assert asked == {"repo_id": "some-org/EAGLE3-tiny", "patterns": ["*.json", "*.safetensors", "*.bin", "*.pt"]}
    assert reports[-1] == (1.0, "downloading some-org/EAGLE3-tiny: 2.0 of 2.0 MB")
    assert head.info.source == "some-org/EAGLE3-tiny" and head.info.format == "EAGLE-3 (SafeAILab / SpecForge)"

