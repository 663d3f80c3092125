"""Branching pattern drafters: prompt lookup, n-gram cache and the suffix tree as token trees (issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import ROOT, TreeDraft
from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.drafters.base import can_branch
from app.engine.drafters.ngram_cache import NgramCacheDrafter
from app.engine.drafters.prompt_lookup import PromptLookupDrafter, lookup_continuation
from app.engine.drafters.registry import DRAFTERS, build_drafter
from app.engine.drafters.suffix_tree import SuffixTreeDrafter, SuffixTrie
from app.engine.loading import load_models
from app.engine.settings import DrafterOptions, SettingsError
from tests.engine.helpers import PROMPTS, run

DEMO = Path(__file__).resolve().parents[2] / "assets" / "models" / "demo"
PATTERN_DRAFTERS = {"prompt-lookup": PromptLookupDrafter, "ngram-cache": NgramCacheDrafter,
                    "suffix-tree": SuffixTreeDrafter}
SHAPES = [(1, 1), (4, 4), (4, 16), (8, 64), (16, 8), (6, 100)]  # (depth, budget)
GREEDY = TokenSampler(None, torch.Generator())


def sequences() -> list[torch.Tensor]:
    """Committed sequences with much and little to copy: random over a few tokens, and repeated phrases."""
    g = torch.Generator().manual_seed(0)
    random = [torch.randint(0, size, (length,), generator=g) for size, length in ((3, 40), (6, 200), (50, 120))]
    phrase = torch.tensor([5, 6, 7, 8, 9, 10, 11])
    repeated = torch.cat([phrase, torch.tensor([1]), phrase[:4], torch.tensor([2, 3]), phrase, phrase[:3]])
    return [*random, repeated, torch.tensor([4, 4, 4, 4, 4])]


def first_branch(tree: TreeDraft) -> list[int]:
    node, tokens = ROOT, []
    while children := tree.children(node):
        node = children[0]
        tokens.append(int(tree.tokens[node]))
    return tokens


def assert_well_formed(tree: TreeDraft, ids: torch.Tensor, depth: int, budget: int) -> None:
    assert 1 <= len(tree) <= budget
    assert tree.q is None and not tree.iid  # deterministic drafters carry no q
    assert tree.tokens.dtype == torch.long and tree.parents.dtype == torch.long
    assert all(p < i for i, p in enumerate(tree.parents.tolist()))  # topological order
    assert max(tree.depths) <= depth
    for node in (ROOT, *range(len(tree))):
        siblings = tree.tokens[tree.children(node)].tolist()
        assert len(siblings) == len(set(siblings))  # distinct tokens among siblings
    # Every edge is a pair of tokens seen next to each other in the committed sequence.
    pairs = set(zip(ids[:-1].tolist(), ids[1:].tolist(), strict=True))
    for node, parent in enumerate(tree.parents.tolist()):
        before = int(ids[-1]) if parent == ROOT else int(tree.tokens[parent])
        assert (before, int(tree.tokens[node])) in pairs


# ---- structure ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PATTERN_DRAFTERS)
def test_trees_are_well_formed_and_lead_with_the_chain(name):
    for ids in sequences():
        for depth, budget in SHAPES:
            chain_drafter, tree_drafter = PATTERN_DRAFTERS[name](), PATTERN_DRAFTERS[name]()
            chain = chain_drafter.propose(ids, depth, GREEDY)
            tree = tree_drafter.propose_tree(ids, depth, budget, GREEDY)
            assert (chain is None) == (tree is None), (name, depth, budget)
            if tree is None:
                continue
            assert_well_formed(tree, ids, depth, budget)
            # The first branch is the chain; prompt lookup may extend a chain that stopped short of the depth
            # (its occurrence was near the end) with a later occurrence's longer continuation.
            expected, first = chain.tokens[:budget].tolist(), first_branch(tree)
            assert first[: len(expected)] == expected, (name, depth, budget)
            assert first == expected or (name == "prompt-lookup" and len(chain) < depth), (name, depth, budget)


@pytest.mark.parametrize("name", PATTERN_DRAFTERS)
def test_a_tree_uses_the_budget_when_there_is_more_than_one_continuation(name):
    ids = sequences()[1]  # 200 random tokens over 6: every n-gram has several successors
    chain = PATTERN_DRAFTERS[name]().propose(ids, 8, GREEDY)
    tree = PATTERN_DRAFTERS[name]().propose_tree(ids, 8, 32, GREEDY)
    assert len(tree) > len(chain) and not tree.is_chain


def test_prompt_lookup_branches_follow_the_chains_preference():
    ids = torch.tensor([1, 2, 3, 9, 1, 2, 4, 9, 1, 2, 3, 8, 1, 2])
    # Occurrences of [1, 2]: followed by 3 9 1 2 4, 4 9 1 2 3, 3 8 1 2; the latest of the longest wins.
    tree = PromptLookupDrafter(max_ngram=2, min_ngram=2).propose_tree(ids, 3, 64, GREEDY)
    paths = {tuple(tree.tokens[tree.path_to(n)].tolist()) for n in range(len(tree)) if not tree.children(n)}
    assert first_branch(tree) == [3, 8, 1]
    assert paths == {(3, 8, 1), (3, 9, 1), (4, 9, 1)}
    assert tree.tokens[tree.children(ROOT)].tolist() == [3, 4]  # siblings in the chain's order of preference


def reference_lookup(ids: list[int], k: int, max_ngram: int, min_ngram: int) -> list[int] | None:
    """Prompt lookup spelled out: the longest n with an earlier match; the most tokens offered, then the latest."""
    for n in range(min(max_ngram, len(ids) - 1), min_ngram - 1, -1):
        starts = [s for s in range(len(ids) - n) if ids[s: s + n] == ids[-n:]]
        if starts:
            best = max(starts, key=lambda s: (min(len(ids) - n - s, k), s))
            return ids[best + n: best + n + k]
    return None


def test_prompt_lookup_chain_is_unchanged():
    for ids in sequences():
        for k in (1, 4, 9):
            tokens = lookup_continuation(ids, k, 3, 1)
            assert (None if tokens is None else tokens.tolist()) == reference_lookup(ids.tolist(), k, 3, 1)


def test_ngram_cache_branches_into_the_successors_that_pass_the_thresholds():
    ids = torch.tensor([7, 1, 7, 1, 7, 2, 7, 1, 7, 3, 7])  # after 7: 1 three times, then 2 and 3 once each
    tree = NgramCacheDrafter(min_n=1, max_n=1).propose_tree(ids, 1, 8, GREEDY)
    assert tree.tokens.tolist() == [1, 2, 3]
    strict = NgramCacheDrafter(min_n=1, max_n=1, min_count=2).propose_tree(ids, 1, 8, GREEDY)
    assert strict.tokens.tolist() == [1]


# ---- the suffix tree ------------------------------------------------------------------------------


def test_suffix_trie_counts_every_short_substring():
    trie = SuffixTrie(max_depth=3)
    trie.add([1, 2, 1, 2, 3])
    assert trie.walk(trie.root, [1, 2]).count == 2
    assert trie.walk(trie.root, [2, 1, 2]).count == 1
    assert trie.walk(trie.root, [1, 2, 1, 2]) is None  # longer than the max depth
    assert trie.walk(trie.root, [3, 1]) is None
    trie.add([3, 1])  # a new sequence: no substring spans the two
    assert trie.walk(trie.root, [3, 1]).count == 1
    node, m = trie.match([9, 2, 1, 2], longest=2)
    assert m == 2 and {t: c.count for t, c in node.children.items()} == {1: 1, 3: 1}
    trie.remove([1, 2, 1, 2, 3])
    assert trie.walk(trie.root, [1, 2]) is None and trie.walk(trie.root, [3, 1]).count == 1


def test_suffix_tree_speculates_longer_after_longer_matches():
    phrase = list(range(10, 30))
    drafter = SuffixTreeDrafter(max_depth=32, spec_factor=1.0, min_prob=0.1)
    for m in (1, 3, 6):
        ids = torch.tensor(phrase + [99] + phrase[:m])
        draft = drafter.propose(ids, 16, GREEDY)
        assert draft.tokens.tolist() == phrase[m: 2 * m]  # ⌊α·m⌋ tokens of the earlier occurrence
    twice = SuffixTreeDrafter(spec_factor=2.0).propose(torch.tensor(phrase + [99] + phrase[:3]), 16, GREEDY)
    assert len(twice) == 6


def test_suffix_tree_prefers_a_shorter_match_that_offers_more():
    ids = torch.tensor([9, 5, 6, 5, 6, 5, 6, 5, 6])  # a loop: the longest match (6 tokens) occurred 2 tokens back
    drafter = SuffixTreeDrafter(spec_factor=2.0)
    assert drafter.local.match(ids.tolist(), 16)[1] == 0  # before the first call the trie is empty
    assert drafter.propose(ids, 8, GREEDY).tokens.tolist() == [5, 6, 5, 6]  # the longest match offers [5, 6]
    assert drafter.local.match(ids.tolist(), 16)[1] == 6


def test_suffix_tree_min_prob_prunes_rare_continuations():
    ids = torch.tensor([5, 1, 5, 1, 5, 1, 5, 1, 5, 2, 5])  # after 5: 1 four times, 2 once
    loose = SuffixTreeDrafter(spec_factor=4.0, min_prob=0.0).propose_tree(ids, 1, 8, GREEDY)
    strict = SuffixTreeDrafter(spec_factor=4.0, min_prob=0.5).propose_tree(ids, 1, 8, GREEDY)
    assert loose.tokens.tolist() == [1, 2] and strict.tokens.tolist() == [1]


def test_suffix_tree_global_part_drafts_an_earlier_requests_output():
    earlier_prompt, output, prompt = list(range(0, 30)), list(range(100, 160)), list(range(200, 230))
    drafter = SuffixTreeDrafter(spec_factor=1.0)
    drafter.propose(torch.tensor(earlier_prompt), 4, GREEDY)
    drafter.propose(torch.tensor(earlier_prompt + output), 4, GREEDY)  # the first request ran to here
    ids = torch.tensor(prompt + output[:6])  # a new request that starts repeating that output
    assert SuffixTreeDrafter(spec_factor=1.0).propose(ids, 8, GREEDY) is None  # nothing to copy in this request
    assert drafter.propose(ids, 8, GREEDY).tokens.tolist() == output[6:12]  # 6 matched: ⌊1·6⌋ drafts
    assert first_branch(drafter.propose_tree(ids, 8, 16, GREEDY)) == output[6:12]
    # The per-request part forgot the earlier request: its prompt is not in this one's trie.
    assert drafter.local.walk(drafter.local.root, earlier_prompt[:2]) is None


def test_suffix_tree_global_part_keeps_outputs_only_and_forgets_the_oldest(monkeypatch):
    import app.engine.drafters.suffix_tree as suffix_tree

    monkeypatch.setattr(suffix_tree, "MAX_OUTPUTS", 2)
    drafter = SuffixTreeDrafter()
    for request in range(4):
        prompt = [1000 + request]
        drafter.propose(torch.tensor(prompt), 4, GREEDY)
        drafter.propose(torch.tensor(prompt + [10 * request + i for i in range(1, 6)]), 4, GREEDY)
    drafter.reset()  # the last request's output joins too
    shared = drafter.shared
    assert shared.walk(shared.root, [1000]) is None  # prompts stay out
    assert shared.walk(shared.root, [1, 2]) is None and shared.walk(shared.root, [11, 12]) is None  # evicted
    assert shared.walk(shared.root, [21, 22]).count == 1 and shared.walk(shared.root, [31, 32]).count == 1


def drafts(drafter, ids: torch.Tensor) -> tuple:
    chain = drafter.propose(ids, 6, GREEDY)
    tree = drafter.propose_tree(ids, 6, 24, GREEDY)
    return (None if chain is None else chain.tokens.tolist(),
            None if tree is None else (tree.tokens.tolist(), tree.parents.tolist()))


@pytest.mark.parametrize("name", PATTERN_DRAFTERS)
def test_incremental_updates_and_rollbacks_match_a_fresh_drafter(name):
    ids = torch.cat([sequences()[1][:150], sequences()[3]])
    kept = PATTERN_DRAFTERS[name]()
    lengths = [30, 31, 35, 60, 157, 90, 91, 40, 120]  # grows one token, several, then rolls back and regrows
    for n in lengths:
        assert drafts(kept, ids[:n]) == drafts(PATTERN_DRAFTERS[name](), ids[:n]), (name, n)


# ---- through the decoder --------------------------------------------------------------------------


def assert_tree_identity(decoder: SpeculativeDecoder, prompts, k: int = 6, max_new_tokens: int = 48) -> None:
    for prompt in prompts:
        _, plain = run(decoder, prompt, drafters=(), max_new_tokens=max_new_tokens)
        for name in PATTERN_DRAFTERS:
            for budget in (4, 16, 64):
                decoder.forget_caches()
                passes, spec = run(decoder, prompt, drafters=(name,), k=k, tree=budget,
                                   max_new_tokens=max_new_tokens)
                assert spec.token_ids == plain.token_ids, (name, budget, prompt)
                assert sum(len(p.committed_ids) for p in passes) == len(spec.token_ids)
                assert all(len(p.committed_ids) <= k + 1 for p in passes)


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_qwen2"])
def test_greedy_tree_decoding_equals_autoregressive(request, arch):
    target, draft = request.getfixturevalue(arch)
    prompts = PROMPTS if arch == "tiny_llama" else PROMPTS[:2]
    assert_tree_identity(SpeculativeDecoder(load_models(str(target), str(draft))), prompts)


@pytest.mark.skipif(not (DEMO / "target" / "model.safetensors").exists(), reason="demo models not built")
def test_greedy_tree_decoding_equals_autoregressive_on_the_demo_family():
    decoder = SpeculativeDecoder(load_models(str(DEMO / "target"), str(DEMO / "draft"), device="cpu"))
    assert_tree_identity(decoder, PROMPTS[:1], k=8, max_new_tokens=40)


def test_suffix_tree_second_request_drafts_from_the_first(tiny_llama):
    target, draft = tiny_llama
    decoder = SpeculativeDecoder(load_models(str(target), str(draft)))
    settings = dict(drafters=("suffix-tree",), k=8, max_new_tokens=48)
    prompt = PROMPTS[1]

    def accepted(passes) -> int:
        return sum(len(p.committed_ids) - 1 for p in passes)

    _, first = run(decoder, prompt, **settings)
    for tree in (None, 16):
        decoder.forget_caches()
        fresh, fresh_end = run(decoder, prompt, tree=tree, **settings)  # the first request of a session
        again, again_end = run(decoder, prompt, tree=tree, **settings)  # the same text once more
        assert again_end.token_ids == fresh_end.token_ids == first.token_ids
        assert accepted(again) > accepted(fresh) and len(again) < len(fresh), tree


# ---- registry and options -------------------------------------------------------------------------


def test_registry_says_which_drafters_branch(tiny_llama):
    target, draft = tiny_llama
    models = load_models(str(target), str(draft))
    built = [entry for entry in DRAFTERS if entry.available(models)]
    assert {"prompt-lookup", "ngram-cache", "suffix-tree"} <= {entry.name for entry in built}
    for entry in built:
        assert entry.branches == can_branch(build_drafter(entry.name, models, DrafterOptions())), entry.name


def test_registry_builds_the_suffix_tree_from_its_options(tiny_llama):
    target, draft = tiny_llama
    models = load_models(str(target), str(draft))
    drafter = build_drafter("suffix-tree", models, DrafterOptions(suffix_max_depth=12, suffix_spec_factor=2.5,
                                                                  suffix_min_prob=0.3))
    assert (drafter.max_depth, drafter.spec_factor, drafter.min_prob) == (12, 2.5, 0.3)


@pytest.mark.parametrize("bad", [dict(suffix_max_depth=1), dict(suffix_max_depth=2.5), dict(suffix_spec_factor=0),
                                 dict(suffix_min_prob=1.5), dict(suffix_min_prob="x")])
def test_suffix_tree_options_are_checked(bad):
    with pytest.raises(SettingsError, match="suffix tree"):
        DrafterOptions(**bad)
