"""Learned drafters (Medusa, MTP, EAGLE-style, DFlash-style) on a tiny random Llama target.

The heads come from `tools/train/heads.py --quick` run once for the module in a
subprocess, exactly as a user would run it; that run is itself under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from app.engine.core.sampling import TokenSampler
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.heads import (
    FAMILIES,
    HeadConfig,
    TargetShape,
    build_module,
    default_config,
    dflash,
    eagle,
    read_config,
    save_head,
)
from app.engine.drafters.heads.common import TargetParts
from app.engine.drafters.heads.mtp import MtpDrafter
from app.engine.errors import ModelLoadError
from app.engine.events import EndEvent, PassEvent
from app.engine.loading import load_models
from app.engine.runtime.cached_model import CachedModel
from app.engine.settings import DecodeSettings, LiveSettings, SamplingSettings
from tests.engine.helpers import PROMPTS, ForcedSampler, chi_square_pvalue, first_two_distribution, run

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN_MODULE = ["-m", "tools.train.heads"]  # run from the repository root
LEARNED = tuple(FAMILIES)  # medusa, mtp, eagle, dflash


@pytest.fixture(scope="module")
def quick_heads(tiny_llama, tmp_path_factory):
    """(heads folder, finished process) of one `python -m tools.train.heads --quick` run for the tiny target."""
    root = tmp_path_factory.mktemp("heads")
    command = [sys.executable, *TRAIN_MODULE, "--quick", "--target", str(tiny_llama[0]), "--out",
               str(root / "heads"), "--cache-dir", str(root / "cache"), "--threads", "1"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    return root / "heads", process


@pytest.fixture(scope="module")
def models(tiny_llama, quick_heads):
    folder, process = quick_heads
    assert process.returncode == 0, process.stderr[-3000:]
    return load_models(*map(str, tiny_llama), heads=str(folder))


@pytest.fixture(scope="module")
def decoder(models):
    return SpeculativeDecoder(models)


# ---- training and loading -----------------------------------------------------------------------


def test_quick_training_writes_documented_heads_that_load(quick_heads, models):
    folder, process = quick_heads
    assert process.returncode == 0, process.stderr[-3000:]
    assert "[train-heads]" in process.stderr  # progress on stderr
    assert (folder / "FORMAT.md").read_text().startswith("# Learned drafter heads")
    assert set(models.heads) == set(LEARNED)
    assert set(LEARNED) <= set(models.available_drafters)
    for family in LEARNED:
        config = json.loads((folder / family / "config.json").read_text())
        assert config["family"] == family and config["training"]["steps"] > 0
        assert config["target"] == {"hidden_size": 64, "vocab_size": models.vocab_size, "num_layers": 4}
        weights = load_file(str(folder / family / "model.safetensors"))
        assert all(t.dtype == torch.float16 for t in weights.values())
        assert not any(t.shape[0] == models.vocab_size for t in weights.values())  # LM head is borrowed


def _head_folder(root: Path, family: str, shape: TargetShape) -> Path:
    folder = root / family
    folder.mkdir(parents=True)
    config = default_config(family, shape, "another target")
    save_head(folder, config, build_module(config))
    return root


@pytest.mark.parametrize("change,message", [
    ({"hidden_size": 32}, "hidden size 32 (head) vs 64 (target)"),
    ({"vocab_size": 999}, "vocabulary size 999 (head)"),
    ({"num_layers": 6}, "layers 6 (head) vs 4 (target)"),
])
def test_heads_for_another_target_shape_are_refused_clearly(tiny_llama, tmp_path, models, change, message):
    shape = TargetShape(**{**TargetShape.of(models.target, models.num_layers).__dict__, **change})
    root = _head_folder(tmp_path / "heads", "eagle", shape)
    with pytest.raises(ModelLoadError, match="trained for another target") as error:
        load_models(*map(str, tiny_llama), heads=str(root))
    assert message in str(error.value) and "tools.train.heads" in str(error.value)


def test_weights_that_do_not_match_the_config_are_refused(tiny_llama, tmp_path, models):
    shape = TargetShape.of(models.target, models.num_layers)
    root = _head_folder(tmp_path / "heads", "medusa", shape)
    config_path = root / "medusa" / "config.json"
    payload = json.loads(config_path.read_text())
    payload["arch"]["num_heads"] = 7
    config_path.write_text(json.dumps(payload))
    with pytest.raises(ModelLoadError, match="do not match its config.json"):
        load_models(*map(str, tiny_llama), heads=str(root))


def test_missing_heads_folder_is_a_clear_error(tiny_llama, tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_models(*map(str, tiny_llama), heads=str(tmp_path / "nowhere"))


# ---- decoding -----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", LEARNED)
def test_greedy_speculative_equals_autoregressive(decoder, family):
    for prompt in PROMPTS:
        _, reference = run(decoder, prompt, drafters=(), max_new_tokens=40)
        for k in (2, 6):  # 6 asks for more than the quick heads can draft
            passes, end = run(decoder, prompt, drafters=(family,), k=k, max_new_tokens=40)
            assert end.token_ids == reference.token_ids
            assert {p.drafter for p in passes if p.k} == {family}
            assert all(0 < len(p.drafted) <= p.k for p in passes if p.k)


def test_switching_learned_drafters_mid_generation_keeps_the_output(decoder):
    chain = [("medusa",), ("eagle",), (), ("mtp",), ("dflash",), ("eagle", "prompt-lookup"), ("medusa",),
             ("draft-model",), ("dflash",), ("mtp",), ("eagle",)]
    for prompt in PROMPTS:
        _, reference = run(decoder, prompt, drafters=(), max_new_tokens=60)
        live = LiveSettings(DecodeSettings(drafters=chain[0], k=3, max_new_tokens=60))
        used = []
        for event in decoder.generate(prompt, live):
            if isinstance(event, PassEvent):
                used.append(event.drafter)
                live.update(drafters=chain[(event.index + 1) % len(chain)])
            end = event
        assert isinstance(end, EndEvent) and end.reason != "error", end
        assert end.token_ids == reference.token_ids
        assert set(LEARNED) <= set(used)


@pytest.mark.parametrize("family", LEARNED)
def test_sampled_first_two_tokens_follow_the_target(models, decoder, family):
    prompt, n = "the the the the", 400
    sampling = SamplingSettings(temperature=1.5, top_k=4)
    exact = first_two_distribution(models, prompt, sampling)
    counts, drafted = Counter(), 0
    for seed in range(n):
        passes, end = run(decoder, prompt, drafters=(family,), k=2, max_new_tokens=2, verify="sample",
                          sampling=sampling, seed=seed)
        drafted += sum(len(p.drafted) for p in passes)
        assert all(t.q is not None for p in passes for t in p.drafted)  # q reported: the sample rule applies
        counts[tuple(end.token_ids)] += 1
    assert drafted >= n  # the first pass always drafts
    assert set(counts) <= set(exact)
    assert chi_square_pvalue(counts, exact, n) > 1e-3


# ---- features and drafter state ------------------------------------------------------------------


def _recomputed(model, ids: torch.Tensor, layers) -> list[torch.Tensor]:
    with torch.inference_mode():
        hidden = model(input_ids=ids[None], output_hidden_states=True).hidden_states
    return [hidden[layer][0] for layer in layers]


def test_kept_features_match_a_full_recompute_after_random_rollbacks(models):
    torch.manual_seed(0)
    layers = (1, 2, 4)
    cached = CachedModel(models.target)
    cached.keep_features(layers)
    ids = torch.randint(0, models.vocab_size, (12,))
    cached.advance_to(ids)
    for _ in range(25):
        drafts = torch.randint(0, models.vocab_size, (int(torch.randint(1, 6, ())),))
        cached.advance_to(torch.cat([ids, drafts]))
        accepted = int(torch.randint(0, drafts.numel() + 1, ()))
        ids = torch.cat([ids, drafts[:accepted], torch.randint(0, models.vocab_size, (1,))])
        cached.crop(ids.numel() - 1)
        assert [f.shape[0] for f in cached.features] == [ids.numel() - 1] * 3
        for kept, full in zip(cached.features, _recomputed(models.target, ids[:-1], layers), strict=True):
            torch.testing.assert_close(kept, full, atol=1e-4, rtol=1e-4)


def test_decoder_features_stay_aligned_after_a_generation_with_rollbacks(decoder, models):
    passes, _ = run(decoder, PROMPTS[1], drafters=("eagle",), k=4, max_new_tokens=30)
    assert any(p.n_accepted < len(p.drafted) for p in passes)  # rollbacks happened
    target = decoder.target
    assert target.feature_layers == models.heads["eagle"].config.feature_layers
    for kept, full in zip(target.features, _recomputed(models.target, target.ids, target.feature_layers),
                          strict=True):
        assert kept.shape[0] == target.length
        torch.testing.assert_close(kept, full, atol=1e-4, rtol=1e-4)


def _features(models, ids: torch.Tensor, layers) -> list[torch.Tensor]:
    return _recomputed(models.target, ids[:-1], layers)


@pytest.mark.parametrize("family", LEARNED)
def test_drafter_with_history_drafts_like_a_fresh_one(models, family):
    """Catching up, rolling back and switching requests leave no stale state behind."""
    torch.manual_seed(1)
    spec = models.heads[family]
    used, sampler = spec.build(models, None), TokenSampler(None, torch.Generator())
    for _ in range(8):
        ids = torch.randint(0, models.vocab_size, (int(torch.randint(2, 30, ())),))
        for cut in (ids.numel(), max(2, ids.numel() - 3), ids.numel()):  # advance, roll back, advance again
            prefix = ids[:cut]
            features = _features(models, prefix, spec.config.feature_layers)
            fresh = spec.build(models, None).propose(prefix, 4, sampler, features)
            again = used.propose(prefix, 4, sampler, features)
            assert torch.equal(fresh.tokens, again.tokens)
            torch.testing.assert_close(fresh.q, again.q, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("family", LEARNED)
def test_no_features_means_no_draft(models, family):
    spec = models.heads[family]
    empty = [torch.empty(0, models.target.config.hidden_size) for _ in spec.config.feature_layers]
    drafter = spec.build(models, None)
    assert drafter.propose(torch.tensor([3]), 4, TokenSampler(None, torch.Generator()), empty) is None
    assert drafter.propose(torch.tensor([3]), 4, TokenSampler(None, torch.Generator()), None) is None


def test_mtp_window_recompute_equals_the_full_sequence_computation(models):
    """The drafter recomputes only D*(W-1)+1 rows; the result equals running every depth over all rows."""
    spec = models.heads["mtp"]
    module, parts = spec.module, TargetParts.of(models.target)
    torch.manual_seed(2)
    ids = torch.randint(0, models.vocab_size, (3 * module.window * module.num_depths,))
    (final,) = _features(models, ids, spec.config.feature_layers)
    draft = MtpDrafter("mtp", module, parts, spec.config).propose(ids, module.num_depths,
                                                                  TokenSampler(None, torch.Generator()), [final])
    extended, hidden = ids.clone(), final
    positions = torch.arange(final.shape[0])
    with torch.inference_mode():
        for d, depth in enumerate(module.depths):
            hidden = depth(hidden, parts.embed(extended[positions + d + 1]), positions, module.window)
            logits = parts.logits(depth.out_norm(hidden[-1]))
            torch.testing.assert_close(torch.softmax(logits, -1), draft.q[d], atol=1e-5, rtol=1e-4)
            extended = torch.cat([extended, logits.argmax().view(1)])
    assert torch.equal(extended[ids.numel():], draft.tokens)


def test_head_config_round_trips_through_json(models, quick_heads):
    folder, _ = quick_heads
    config = read_config(folder / "dflash")
    assert HeadConfig.from_json(config.to_json()) == config
    assert config.feature_layers == (1, 2, 4) and config.arch["block_size"] == 4


# ---- training computes what drafting computes ----------------------------------------------------


def _greedy_draft(models, family: str, ids: torch.Tensor, k: int):
    spec = models.heads[family]
    drafter = spec.build(models, None)
    features = _features(models, ids, spec.config.feature_layers)
    return drafter.propose(ids, k, TokenSampler(None, torch.Generator()), features)


def test_eagle_unrolled_training_steps_are_the_drafting_steps(models):
    """Row N-2 of unrolled step s, fed the drafts as its tokens, scores exactly the drafter's q of step s."""
    spec, parts = models.heads["eagle"], TargetParts.of(models.target)
    ids = torch.randint(0, models.vocab_size, (20,), generator=torch.Generator().manual_seed(3))
    draft = _greedy_draft(models, "eagle", ids, 3)
    tokens = torch.cat([ids, draft.tokens[:-1]])  # what training reads at positions N-1 .. N+1
    features = _recomputed(models.target, tokens, spec.config.feature_layers)
    with torch.inference_mode():
        outputs = eagle.unrolled_outputs(spec.module, parts, tokens[None], [f[None] for f in features], 3)
        for s, output in enumerate(outputs):
            q = torch.softmax(parts.logits(spec.module.out_norm(output[0, ids.numel() - 2])), -1)
            torch.testing.assert_close(q, draft.q[s], atol=1e-5, rtol=1e-4)


def test_dflash_training_block_is_the_drafting_block(models):
    spec, parts = models.heads["dflash"], TargetParts.of(models.target)
    bs = spec.module.block_size
    ids = torch.randint(0, models.vocab_size, (20,), generator=torch.Generator().manual_seed(4))
    draft = _greedy_draft(models, "dflash", ids, bs - 1)
    tokens = torch.cat([ids, torch.zeros(bs - 1, dtype=torch.long)])  # block rows read only the anchor
    features = _recomputed(models.target, tokens, spec.config.feature_layers)
    with torch.inference_mode():
        hidden = dflash.training_forward(spec.module, parts, tokens[None], [f[None] for f in features],
                                         torch.tensor([ids.numel() - 1]))
        q = torch.softmax(parts.logits(hidden[0, 1:]), -1)  # (bs-1, V)
    torch.testing.assert_close(q, draft.q, atol=1e-5, rtol=1e-4)


# ---- token trees (docs/ALGORITHMS.md §9) ----------------------------------------------------------


@pytest.mark.parametrize("family", ["eagle", "medusa"])
def test_greedy_token_trees_of_learned_drafters_equal_autoregressive(decoder, family):
    for prompt in PROMPTS[:2]:
        _, reference = run(decoder, prompt, drafters=(), max_new_tokens=32)
        for budget in (4, 16, 64):
            passes, end = run(decoder, prompt, drafters=(family,), k=4, tree=budget, max_new_tokens=32)
            assert end.token_ids == reference.token_ids, (family, budget)
            assert any(p.tree and len(p.tree) > max(n.depth for n in p.tree) for p in passes)  # real branching


def test_eagle_tree_nodes_are_drawn_from_the_chain_q_of_their_path(models):
    """Every node's q (its parent's row) equals the chain drafter's q after the node's path: the tree rounds
    see exactly their ancestors."""
    ids = torch.tensor(models.tokenizer(PROMPTS[0])["input_ids"])
    spec = models.heads["eagle"]
    features = _features(models, ids, spec.config.feature_layers)
    tree = spec.build(models, None).propose_tree(ids, 3, 12, TokenSampler(None, torch.Generator()), features)
    assert tree is not None and len(tree) > 3
    for node in range(len(tree)):
        path = tree.path_to(node)
        chain = spec.build(models, None).propose(ids, len(path), ForcedSampler(tree.tokens[path].tolist()), features)
        assert torch.allclose(tree.q[node], chain.q[len(path) - 1], atol=1e-5), node
