"""A suffix-tree drafter in the style of SuffixDecoding (Oliaro et al., 2024; docs/ALGORITHMS.md §8.10).

Two counting tries of every substring of at most D tokens (D = max depth):
one over this request's prompt and output, rebuilt per request, and a global
one over the outputs of this session's earlier requests (the decoder keeps a
drafter between requests). A node counts the occurrences of its substring, so
the children of the node reached by a pattern are what followed the pattern
and how often.

To draft, match the suffixes of the committed sequence, of at most D/2
tokens so that D/2 remain for the continuation, that occurred earlier with a
successor, in each trie. From a match of m tokens speculate at most
⌊α·m⌋ tokens (SuffixDecoding's MAX_SPEC = α·m: longer matches earn longer
drafts), keeping only nodes whose path frequency, the product along the path
of each child's share of its siblings' counts, is at least a minimum
(SuffixDecoding's min token probability). The chain follows the most frequent
child (ties: the most recently seen); the tree is that chain, then the most
frequent other paths within the node budget (`branching.py`). Of all matches
in both tries, the one whose chain has the largest sum of path frequencies
(expected accepted tokens if the frequencies were acceptance probabilities)
drafts, as SuffixDecoding keeps its best-scoring speculation.

Requests are told apart by the committed sequence itself: a sequence that
extends the last one continues the request; a prefix of it longer than the
request's first sequence is a rollback (the per-request trie is rebuilt from
it); anything else is a new request, and the tokens the previous one
committed after the drafter first saw it join the global trie (the oldest
outputs leave it beyond MAX_OUTPUTS). Deterministic: q is one-hot.
"""

from __future__ import annotations

from collections import deque

import torch

from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import TreeDraft
from app.engine.drafters.base import Draft
from app.engine.drafters.branching import grow_from_chain

MAX_OUTPUTS = 256  # earlier outputs the global trie keeps, oldest out first


class _Node:
    __slots__ = ("children", "count", "last")

    def __init__(self) -> None:
        self.count = 0  # occurrences of the substring this node spells
        self.last = 0  # when it last occurred (the trie's clock): breaks ties in favour of the recent
        self.children: dict[int, _Node] = {}


class SuffixTrie:
    """Every substring of at most `max_depth` tokens of the sequences added, with its number of occurrences."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.root = _Node()
        self._open: list[_Node] = []  # nodes of the suffixes of the sequence being added, shortest first
        self._clock = 0

    def add(self, tokens: list[int]) -> None:
        """Start a new sequence (no substring spans two) and append `tokens` to it."""
        self._open = []
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        """Append to the current sequence: each suffix of up to max_depth tokens ending at a new token counts once."""
        for token in tokens:
            self._clock += 1
            grown = []
            for node in (self.root, *self._open[: self.max_depth - 1]):
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                child.count += 1
                child.last = self._clock
                grown.append(child)
            self._open = grown

    def remove(self, tokens: list[int]) -> None:
        """Take back a sequence added with `add` (its counts; nodes no longer occurring go)."""
        for start in range(len(tokens)):
            node = self.root
            for token in tokens[start: start + self.max_depth]:
                child = node.children[token]
                child.count -= 1
                if not child.count:  # so do all its descendants on this path
                    del node.children[token]
                    break
                node = child
        self._open = []

    def walk(self, node: _Node | None, tokens) -> _Node | None:
        for token in tokens:
            if node is None:
                return None
            node = node.children.get(token)
        return node

    def match(self, context: list[int], longest: int) -> tuple[_Node | None, int]:
        """The node of the longest suffix of `context` (at most `longest` tokens) that occurred with a successor,
        and its length; (None, 0) when even the last token never had one. A suffix that did implies that its
        own suffixes did, so the length is found by bisection."""
        def followed(m: int) -> _Node | None:
            node = self.walk(self.root, context[len(context) - m:])
            return node if node is not None and node.children else None

        low, high = 0, min(longest, len(context))  # followed(low) holds (or low = 0), the answer is <= high
        while low < high:
            middle = (low + high + 1) // 2
            if followed(middle) is not None:
                low = middle
            else:
                high = middle - 1
        return (followed(low), low) if low else (None, 0)

    @staticmethod
    def ranked(node: _Node) -> list[tuple[int, float, _Node]]:
        """The children of `node`, most frequent first (ties: the most recent), with their share of the counts."""
        total = sum(child.count for child in node.children.values())
        order = sorted(node.children.items(), key=lambda item: (-item[1].count, -item[1].last))
        return [(token, child.count / total, child) for token, child in order]


class SuffixTreeDrafter:
    name = "suffix-tree"

    def __init__(self, max_depth: int = 32, spec_factor: float = 2.0, min_prob: float = 0.1) -> None:
        self.max_depth = max_depth
        self.spec_factor = spec_factor
        self.min_prob = min_prob
        self.shared = SuffixTrie(max_depth)  # earlier requests' outputs
        self._outputs: deque[list[int]] = deque()
        self._forget_request()

    feature_layers: tuple[int, ...] = ()

    def _forget_request(self) -> None:
        self.local = SuffixTrie(self.max_depth)  # this request's prompt and output
        self._seen: list[int] = []
        self._start = 0  # tokens of the request when the drafter first saw it

    def reset(self) -> None:
        """A new request begins: this one's output joins the global trie, the per-request trie starts over."""
        output = self._seen[self._start:]
        if len(output) > 1:
            self.shared.add(output)
            self._outputs.append(output)
            if len(self._outputs) > MAX_OUTPUTS:
                self.shared.remove(self._outputs.popleft())
        self._forget_request()

    def _sync(self, ids: list[int]) -> None:
        seen = self._seen
        if seen and ids[: len(seen)] == seen:
            self.local.extend(ids[len(seen):])
        elif seen and self._start < len(ids) < len(seen) and seen[: len(ids)] == ids:  # a rollback
            start = self._start
            self._forget_request()
            self.local.add(ids)
            self._start = start
        else:
            self.reset()
            self.local.add(ids)
            self._start = len(ids)
        self._seen = list(ids)

    def _best(self, context: list[int], depth: int) -> tuple[SuffixTrie, _Node, int, list[int]] | None:
        """The trie and match that draft: its node, the speculation length ⌊α·m⌋ and the chain from it.

        Every suffix length up to each trie's longest match proposes a chain; the largest sum of path frequencies
        wins (ties: the longer match, then the per-request trie). The longest match alone is not enough: in text
        that has begun to repeat itself, it often occurred just once, a few tokens back, and so offers only those
        few tokens, while a shorter match that occurred several times offers more."""
        best: tuple[float, SuffixTrie, _Node, int, list[int]] | None = None
        for trie in (self.local, self.shared):
            _, longest = trie.match(context, self.max_depth // 2)
            for m in range(longest, 0, -1):
                matched = trie.walk(trie.root, context[len(context) - m:])
                assert matched is not None  # a suffix of a match that occurred is one too
                limit = min(depth, int(self.spec_factor * m), self.max_depth - m)
                chain, score = self._chain(matched, limit)
                if chain and (best is None or score > best[0]):
                    best = (score, trie, matched, limit, chain)
        return None if best is None else best[1:]

    def _chain(self, node: _Node, limit: int) -> tuple[list[int], float]:
        """The most frequent path from `node` (<= limit tokens, path frequency >= min_prob) and the sum of its
        path frequencies."""
        chain: list[int] = []
        score, frequency = 0.0, 1.0
        while len(chain) < limit and node.children:
            total = sum(child.count for child in node.children.values())
            token, child = max(node.children.items(), key=lambda item: (item[1].count, item[1].last))
            frequency *= child.count / total
            if frequency < self.min_prob:
                break
            chain.append(token)
            score += frequency
            node = child
        return chain, score

    def propose(self, ids: torch.Tensor, k: int, sampler: TokenSampler, features=None) -> Draft | None:
        context = ids.tolist()
        self._sync(context)
        best = self._best(context, k)
        return None if best is None else Draft(torch.tensor(best[3], dtype=torch.long), None)

    def propose_tree(self, ids: torch.Tensor, depth: int, budget: int, sampler: TokenSampler,
                     features=None) -> TreeDraft | None:
        context = ids.tolist()
        self._sync(context)
        best = self._best(context, depth)
        if best is None:
            return None
        trie, matched, limit, chain = best

        def successors(path: tuple[int, ...]) -> list[tuple[int, float]]:
            node = trie.walk(matched, path)
            return [] if node is None else [(token, share) for token, share, _ in trie.ranked(node)]

        return grow_from_chain(chain, successors, limit, budget, self.min_prob)
