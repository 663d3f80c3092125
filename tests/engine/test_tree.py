"""Token trees (docs/ALGORITHMS.md §9): the tree mask, cache compaction, rules, identity, losslessness, bad input."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import app.engine.core.tree as tree_module
from app.engine.core.sampling import TokenSampler
from app.engine.core.stats import GenerationStats, RankAcceptance, expected_tokens_per_pass, rank_paths
from app.engine.core.tree import (
    ROOT,
    TreeDraft,
    TreeLayout,
    best_nodes,
    merge_continuations,
    sampled_walk,
    subtree,
    verification_parents,
    verify_tree_greedy,
    verify_tree_sampling,
)
from app.engine.core.verify import fetch, verify_greedy
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.model_drafter import ModelDrafter
from app.engine.events import NoticeEvent
from app.engine.loading import load_models
from app.engine.runtime.cached_model import CachedModel, TreeAttentionUnsupported
from app.engine.settings import (
    DecodeSettings,
    LiveSettings,
    RepetitionSettings,
    SamplingSettings,
    SettingsError,
)
from tests.engine.helpers import PROMPTS, ForcedSampler, chi_square_pvalue, run

VOCAB = 97


def tiny_model(arch: str, seed: int = 0):
    torch.manual_seed(seed)
    shape = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=256)
    if arch == "gpt2":
        config = AutoConfig.for_model(arch, vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256)
    elif arch == "mistral":
        config = AutoConfig.for_model(arch, intermediate_size=128, num_key_value_heads=2, sliding_window=None, **shape)
    else:
        config = AutoConfig.for_model(arch, intermediate_size=128, num_key_value_heads=2, **shape)
    return AutoModelForCausalLM.from_config(config).eval()


def random_tree(rng: random.Random, n: int) -> TreeDraft:
    parents = [ROOT] + [rng.randrange(-1, i) for i in range(1, n)]
    return TreeDraft(torch.tensor([rng.randrange(VOCAB) for _ in range(n)]), torch.tensor(parents))


def full_logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(ids[None]).logits[0].float()  # (T, V)


# ---- the one forward --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "gpt2"])
def test_every_node_scores_like_a_forward_of_its_own_path(arch):
    model, rng = tiny_model(arch), random.Random(arch)
    for _ in range(3):
        cached = CachedModel(model)
        ids = torch.tensor([rng.randrange(VOCAB) for _ in range(rng.randrange(3, 20))])
        cached.advance_to(ids[:-1], last=1)
        tree = random_tree(rng, rng.randrange(1, 24))
        logits = cached.extend_tree(torch.cat([ids[-1:], tree.tokens]), verification_parents(tree))  # (n+1, V)
        assert torch.allclose(logits[0], full_logits(model, ids)[-1], atol=1e-4)
        for node in range(len(tree)):
            path = torch.cat([ids, tree.tokens[tree.path_to(node)]])
            assert torch.allclose(logits[node + 1], full_logits(model, path)[-1], atol=1e-4), (arch, node)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_cache_compacted_after_many_trees_equals_a_recompute(arch):
    model, rng = tiny_model(arch, seed=1), random.Random(7)
    cached = CachedModel(model)
    ids = torch.tensor([rng.randrange(VOCAB) for _ in range(6)])
    cached.advance_to(ids[:-1], last=1)
    for _ in range(25):
        tree = random_tree(rng, rng.randrange(1, 16))
        cached.extend_tree(torch.cat([ids[-1:], tree.tokens]), verification_parents(tree))
        path = tree.path_to(rng.randrange(len(tree)))[: rng.randrange(0, 5)]  # any accepted prefix of a path
        cached.keep_path([0] + [node + 1 for node in path])
        ids = torch.cat([ids, tree.tokens[path], torch.tensor([rng.randrange(VOCAB)])])  # + the appended token
        assert cached.length == cached.cache.get_seq_length() == ids.numel() - 1
        assert torch.equal(cached.ids, ids[:-1])
        if rng.random() < 0.2:  # a rollback between trees
            ids = ids[: rng.randrange(2, ids.numel())]
            cached.crop(ids.numel() - 1)
    assert torch.allclose(cached.advance_to(ids)[-1], full_logits(model, ids)[-1], atol=1e-4)


def test_a_dropped_tail_leaves_the_sequence_cached():
    model = tiny_model("llama")
    cached = CachedModel(model)
    ids = torch.arange(1, 9)
    cached.advance_to(ids, last=1)
    cached.extend_tree(torch.tensor([3, 4, 5]), torch.tensor([-1, 0, -1]))
    next_logits = cached.advance_to(torch.cat([ids, torch.tensor([11])]))[-1]  # drops the tail first
    assert torch.allclose(next_logits, full_logits(model, torch.cat([ids, torch.tensor([11])]))[-1], atol=1e-4)


# ---- building trees ---------------------------------------------------------------------------------------------


def test_merged_continuations_share_prefixes_within_the_budget():
    tree = merge_continuations([[1, 2, 3], [1, 2, 4], [5], [1, 6, 7]], budget=6)
    assert tree is not None and len(tree) == 6
    assert tree.tokens.tolist() == [1, 2, 3, 4, 5, 6] and tree.parents.tolist() == [-1, 0, 1, 1, -1, 0]
    assert merge_continuations([[]], budget=4) is None


def test_best_subtree_keeps_the_best_nodes_closed_under_ancestors_siblings_best_first():
    tokens = torch.tensor([10, 11, 12, 13, 14])
    parents = torch.tensor([-1, -1, 0, 0, 1])
    scores = torch.tensor([-0.1, -0.5, -2.0, -0.3, -0.6])
    tree = subtree(tokens, parents, best_nodes(parents, scores, budget=4))
    assert tree.tokens.tolist() == [10, 11, 13, 14] and tree.parents.tolist() == [-1, -1, 0, 1]


# ---- rules ------------------------------------------------------------------------------------------------------


def test_greedy_takes_the_longest_matching_path_and_appends_the_argmax():
    tree = TreeDraft(torch.tensor([1, 2, 3, 4]), torch.tensor([-1, -1, 1, 1]))
    logits = torch.full((5, 6), -5.0)
    logits[0, 2] = logits[2, 4] = logits[4, 5] = 5.0  # root -> 2 (node 1) -> 4 (node 3) -> appends 5
    logits[1, 0] = logits[3, 0] = 5.0
    verdict = verify_tree_greedy(tree, logits)
    assert verdict.path == (1, 3) and verdict.next_token == 5
    assert [verdict.outcome(i) for i in range(4)] == ["rejected", "accepted", "rejected", "accepted"]


def test_a_chain_tree_is_verified_like_the_chain():
    rng = torch.Generator().manual_seed(3)
    for _ in range(50):
        logits = torch.randn(5, 8, generator=rng)
        drafts = logits[:4].argmax(-1)
        drafts[int(torch.randint(0, 5, (), generator=rng)) % 4] = int(torch.randint(0, 8, (), generator=rng))
        tree_verdict = verify_tree_greedy(TreeDraft.chain(drafts), logits)
        chain_verdict = verify_greedy(drafts, logits)
        assert len(tree_verdict.path) == chain_verdict.n_accepted
        assert tree_verdict.next_token == chain_verdict.next_token


V = 5
P1 = torch.tensor([0.30, 0.05, 0.25, 0.15, 0.25])  # the target after the prefix
P2 = torch.softmax(torch.tensor([[2.0, 0.0, 1.0, -1.0, 0.5], [0.0, 1.5, 0.0, 0.3, -1.0], [1.0, 1.0, 1.0, 0.0, 0.0],
                                 [-2.0, 0.0, 2.0, 0.0, 1.0], [0.0, 0.0, 0.0, 3.0, 0.0]]), dim=-1)  # p(t2 | t1)
Q1 = torch.tensor([0.10, 0.40, 0.30, 0.10, 0.10])  # a drafter unlike the target
Q2 = torch.softmax(torch.tensor([[0.0, 2.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 2.0], [0.0, 0.0, 0.0, 2.0, 0.0],
                                 [2.0, 0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0, 0.0]]), dim=-1)
EXACT = {(a, b): float(P1[a] * P2[a, b]) for a in range(V) for b in range(V)}


def deterministic_tree(_: torch.Generator) -> TreeDraft:
    return TreeDraft(torch.tensor([0, 2, 3, 1, 4, 0]), torch.tensor([-1, -1, -1, 0, 0, 1]))


def iid_tree(generator: torch.Generator) -> TreeDraft:
    """Three children of the root drawn from Q1, two children of each drawn from Q2 of its token."""
    firsts = torch.multinomial(Q1, 3, replacement=True, generator=generator)
    tokens, parents, q = firsts.tolist(), [-1, -1, -1], [Q1] * 3
    for i, first in enumerate(firsts.tolist()):
        tokens += torch.multinomial(Q2[first], 2, replacement=True, generator=generator).tolist()
        parents += [i, i]
        q += [Q2[first]] * 2
    return TreeDraft(torch.tensor(tokens), torch.tensor(parents), torch.stack(q), iid=True)


def first_two(make_tree, n: int) -> Counter:
    """Counts of the first two tokens the rule outputs; when a block ends after one token, the next pass's target
    draws the second from P2, as the decoder's next pass would."""
    generator = torch.Generator().manual_seed(11)
    counts: Counter = Counter()
    for _ in range(n):
        tree = make_tree(generator)
        rows = torch.stack([P1] + [P2[token] for token in tree.tokens.tolist()])  # (n+1, V): row of each node
        verdict = verify_tree_sampling(tree, rows, generator)
        out = [int(tree.tokens[node]) for node in verdict.path] + [verdict.next_token]
        if len(out) < 2:
            out.append(int(torch.multinomial(P2[out[0]], 1, generator=generator)))
        counts[tuple(out[:2])] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("make_tree", [deterministic_tree, iid_tree], ids=["deterministic", "iid"])
def test_both_sampling_rules_keep_the_target_distribution(make_tree):
    n = 12000
    assert chi_square_pvalue(first_two(make_tree, n), EXACT, n) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("make_tree", [deterministic_tree, iid_tree], ids=["deterministic", "iid"])
def test_a_rule_that_forgets_the_rejected_siblings_fails_the_same_test(make_tree, monkeypatch):
    monkeypatch.setattr(tree_module, "_residual", lambda p_prime, q_row, x: p_prime)  # siblings see the old p'
    n = 12000
    assert chi_square_pvalue(first_two(make_tree, n), EXACT, n) < 1e-6


def walk_one_child_at_a_time(tree: TreeDraft, p: torch.Tensor, u: torch.Tensor, generator: torch.Generator):
    """§9.3 as written: from the root, try each reached node's children in order against the running p'."""
    path, tried, chances, node = [], [], {}, ROOT
    while True:
        p_prime, accepted = p[node + 1].clone(), None
        for child in tree.children(node):
            x = int(tree.tokens[child])
            p_x, q_x = float(p_prime[x]), float(tree.q[child, x]) if tree.iid else None
            chance = p_x if q_x is None else (0.0 if p_x <= 0 else min(1.0, p_x / q_x))
            tried.append(child)
            chances[child] = chance
            if float(u[child]) < chance:
                accepted = child
                break
            r = p_prime.clone()
            if q_x is None:
                r[x] = 0.0
            else:
                r = (p_prime - tree.q[child]).clamp(min=0.0)
            p_prime = r / r.sum() if r.sum() > 0 else p_prime
        if accepted is None:
            return path, tried, chances, int(torch.multinomial(p_prime, 1, generator=generator))
        path.append(accepted)
        node = accepted


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "host"])
@pytest.mark.parametrize("iid", [False, True], ids=["deterministic", "iid"])
def test_both_walks_are_the_one_child_at_a_time_rule(iid, batched):
    """Same uniforms per node, same final draw: the batched walk (an accelerator's) and the host walk (the
    CPU's) each decide exactly what §9.3 decides."""
    rng = torch.Generator().manual_seed(5)
    depths = Counter()
    for trial in range(100):
        n = int(torch.randint(1, 14, (), generator=rng))
        parents = [int(torch.randint(-1, i, (), generator=rng)) for i in range(n)]
        v = 16
        p = torch.softmax(torch.randn(n + 1, v, generator=rng) * 4, dim=-1)
        q = torch.softmax(torch.randn(n + 1, v, generator=rng) * 2, dim=-1)[torch.tensor(parents) + 1]  # parent's q
        if iid:
            tokens = [int(torch.multinomial(q[i], 1, generator=rng)) for i in range(n)]
        else:  # siblings distinct: the parent row's likeliest tokens, best first (as top-k drafters choose)
            ranked, rank = p.argsort(dim=-1, descending=True).tolist(), Counter()
            tokens = []
            for parent in parents:
                tokens.append(ranked[parent + 1][rank[parent]])
                rank[parent] += 1
        tree = TreeDraft(torch.tensor(tokens), torch.tensor(parents), q if iid else None, iid=iid)
        walk = sampled_walk(tree, TreeLayout.of(tree, p.device), p, torch.Generator().manual_seed(trial), batched)
        verdict = walk.finish(fetch(walk.reads))
        again = torch.Generator().manual_seed(trial)
        u = torch.rand(n, generator=again)
        path, tried, chances, token = walk_one_child_at_a_time(tree, p, u, again)
        assert list(verdict.path) == path and list(verdict.tried) == tried and verdict.next_token == token
        assert verdict.accept_prob == pytest.approx(chances, abs=1e-6)
        assert (verdict.residual is None) == (not tree.children(path[-1] if path else ROOT))
        depths[len(path)] += 1
    assert len(depths) >= 3  # rejections at the root and paths of several lengths were compared


# ---- through the decoder ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_decoder(tiny_llama):
    return SpeculativeDecoder(load_models(*map(str, tiny_llama)))


@pytest.mark.parametrize("budget", [4, 16, 64])
@pytest.mark.parametrize("drafters", [("draft-model",), ("layer-skip",), ("prompt-lookup",), ("ngram-cache",)])
def test_greedy_tree_runs_equal_autoregressive_decoding(llama_decoder, drafters, budget):
    for prompt in PROMPTS[:2]:
        _, plain = run(llama_decoder, prompt, drafters=(), max_new_tokens=40)
        passes, tree_run = run(llama_decoder, prompt, drafters=drafters, k=4, tree=budget, max_new_tokens=40)
        assert tree_run.token_ids == plain.token_ids
        for event in passes:
            if event.tree:
                assert len(event.tree) <= budget and max(node.depth for node in event.tree) <= 4
                assert len(event.committed_ids) == len(event.path) + (event.appended is not None)


@pytest.mark.slow
def test_greedy_identity_holds_on_mistral(tmp_path):
    from tests.tiny_models import tiny_pair

    decoder = SpeculativeDecoder(load_models(*map(str, tiny_pair(tmp_path, "mistral"))))
    for prompt in PROMPTS[:2]:
        _, plain = run(decoder, prompt, drafters=(), max_new_tokens=32)
        for budget in (4, 16, 64):
            passes, tree_run = run(decoder, prompt, drafters=("draft-model",), k=4, tree=budget, max_new_tokens=32)
            assert tree_run.token_ids == plain.token_ids and any(p.tree for p in passes)


@pytest.mark.parametrize("sampling", [None, SamplingSettings(temperature=1.3)], ids=["greedy", "sample"])
def test_draft_model_tree_nodes_are_drawn_from_the_chain_q_of_their_path(llama_decoder, sampling):
    """Every node's q (its parent's row) equals the chain's q after the node's path: the drafter's tree rounds
    see exactly their ancestors; under sampling the children are i.i.d. draws (duplicates allowed)."""
    models = llama_decoder.models
    ids = torch.tensor(models.tokenizer(PROMPTS[2])["input_ids"])
    sampler = TokenSampler(sampling, torch.Generator().manual_seed(0))
    tree = ModelDrafter("draft-model", models.draft, models.vocab_size).propose_tree(ids, 3, 14, sampler)
    assert len(tree) > 3 and tree.iid == (sampling is not None)
    for node in range(len(tree)):
        path = tree.path_to(node)
        chain = ModelDrafter("draft-model", models.draft, models.vocab_size).propose(
            ids, len(path), ForcedSampler(tree.tokens[path].tolist()))
        expected = chain.q[len(path) - 1] if sampling is None else \
            TokenSampler(sampling, torch.Generator()).probs(torch.log(chain.q[len(path) - 1]))
        assert torch.allclose(tree.q[node], expected, atol=1e-5), node


def test_greedy_identity_holds_on_qwen2_and_when_switching_between_chain_and_tree(tiny_qwen2):
    decoder = SpeculativeDecoder(load_models(*map(str, tiny_qwen2)))
    _, plain = run(decoder, PROMPTS[0], drafters=(), max_new_tokens=40)
    live = LiveSettings(DecodeSettings(drafters=("draft-model", "prompt-lookup"), k=3, max_new_tokens=40))
    events = []
    for event in decoder.generate(PROMPTS[0], live):
        events.append(event)
        if getattr(event, "type", "") == "pass":  # alternate chain and tree every pass
            now = live.get()
            live.set(now.with_changes(tree=None if now.tree else 8))
    passes = [e for e in events if e.type == "pass"]
    assert events[-1].token_ids == plain.token_ids
    assert any(p.tree for p in passes) and any(p.tree is None and p.drafted for p in passes)


def test_tree_expected_tokens_reduce_to_the_chain_formula():
    rates = RankAcceptance()
    for accepted in [True] * 7 + [False] * 3:
        rates.add_trial(0, accepted)
    chain_paths = Counter({(0,) * d: 1 for d in range(1, 5)})  # one chain of 4 nodes
    from app.engine.core.stats import expected_tree_tokens
    assert expected_tree_tokens(rates, chain_paths, 1) == pytest.approx(expected_tokens_per_pass(0.7, 4))


def test_stats_of_a_tree_run_count_rank_trials_and_an_expected_value(llama_decoder):
    passes, end = run(llama_decoder, PROMPTS[0], drafters=("prompt-lookup",), k=4, tree=16, max_new_tokens=40)
    stats = GenerationStats()
    for event in passes:
        stats.add(event)
    assert stats.tree_passes == sum(1 for p in passes if p.tree)
    assert end.stats.expected_tokens_per_pass == pytest.approx(stats.expected_tokens_per_pass)
    tree_pass = next(p for p in passes if p.tree)
    assert len(rank_paths(tree_pass.tree)) == len(tree_pass.tree)


# ---- bad input --------------------------------------------------------------------------------------------------


def test_bad_tree_settings_say_what_is_allowed():
    with pytest.raises(SettingsError, match="node budget"):
        DecodeSettings(tree=0)
    with pytest.raises(SettingsError, match="node budget"):
        DecodeSettings(tree=1000)
    with pytest.raises(SettingsError, match="ASD verification is a chain rule"):
        DecodeSettings(tree=8, verify="asd")


def test_a_budget_above_the_context_left_is_refused(tiny_llama, monkeypatch):
    models = load_models(*map(str, tiny_llama))
    prompt_tokens = len(SpeculativeDecoder(models).encode_prompt(PROMPTS[0]))
    room = 10
    monkeypatch.setattr(models.target.config, "max_position_embeddings", prompt_tokens + room)
    decoder = SpeculativeDecoder(models)
    with pytest.raises(SettingsError, match="context has left"):
        decoder.generate(PROMPTS[0], DecodeSettings(tree=room + 1, max_new_tokens=8))


def test_a_target_without_tree_masks_falls_back_to_chains_with_a_notice(tiny_llama, monkeypatch):
    decoder = SpeculativeDecoder(load_models(*map(str, tiny_llama)))
    _, plain = run(decoder, PROMPTS[1], drafters=(), max_new_tokens=24)
    monkeypatch.setattr(decoder.target, "tree_problem", lambda: "this model's attention takes no custom masks")
    events = list(decoder.generate(PROMPTS[1], DecodeSettings(drafters=("prompt-lookup",), tree=8, max_new_tokens=24)))
    notices = [e for e in events if isinstance(e, NoticeEvent)]
    assert len(notices) == 1 and "takes no custom masks: this generation drafts chains" in notices[0].message
    assert events[-1].token_ids == plain.token_ids and not any(getattr(e, "tree", None) for e in events)
    with pytest.raises(TreeAttentionUnsupported):
        decoder.target.extend_tree(torch.tensor([1]), torch.tensor([-1]))


def test_attention_without_custom_masks_and_sliding_windows_are_named(monkeypatch):
    cached = CachedModel(tiny_model("llama"))
    assert cached.tree_problem() is None
    monkeypatch.setattr(cached.model.config, "_attn_implementation", "flash_attention_2")
    assert "flash_attention_2" in (cached.tree_problem() or "")
    monkeypatch.setattr(cached.model.config, "_attn_implementation", "sdpa")
    cached.model.config.sliding_window = 16
    assert "sliding-window" in (cached.tree_problem() or "")


@pytest.mark.parametrize("drafters", [("draft-model",), ("prompt-lookup",)])
def test_greedy_trees_with_repetition_controls_equal_hf_generate(llama_decoder, drafters):
    from tests.engine.test_repetition import hf_generate

    for prompt in PROMPTS[:2]:
        expected = hf_generate(llama_decoder.models, prompt, 40, repetition_penalty=1.3, no_repeat_ngram_size=3)
        _, end = run(llama_decoder, prompt, drafters=drafters, k=4, tree=12, max_new_tokens=40,
                     repetition=RepetitionSettings(1.3, 3))
        assert list(end.token_ids) == expected


def test_node_texts_equal_the_stream_peek_along_every_path(tmp_path):
    from app.engine.core.detok import StreamDetokenizer
    from tests.tiny_models import make_tokenizer

    tokenizer = make_tokenizer(tmp_path)
    ids = tokenizer("Ünïcödé тест 漢字 emoji 🙂 and fox")["input_ids"]
    detok = StreamDetokenizer(tokenizer, ids[:2])
    rest = ids[2:]
    tree = TreeDraft(torch.tensor(rest + rest[3:]), torch.tensor(list(range(-1, len(rest) - 1)) +
                                                                  [2] + list(range(len(rest), 2 * len(rest) - 4))))
    texts = detok.peek_tree(tree.tokens.tolist(), tree.parents.tolist())
    for leaf in (len(rest) - 1, len(tree) - 1):
        path = tree.path_to(leaf)
        assert [texts[node] for node in path] == detok.peek(tree.tokens[path].tolist())


def test_the_inspector_story_of_a_tree_pass_names_its_size_and_main_line(llama_decoder):
    from app.teaching.explain import explain_pass

    passes, _ = run(llama_decoder, PROMPTS[0], drafters=("prompt-lookup",), k=4, tree=16, max_new_tokens=40)
    event = next(p for p in passes if p.tree and len(p.tree) > len(p.drafted))
    story = explain_pass(event)
    assert f"token tree of {len(event.tree)} nodes" in story and "single target forward" in story
    assert all(token.text.replace("\n", "↵") in story for token in event.drafted)
