"""The two shapes a pass's draft takes, behind one small protocol: a chain (`ChainBlock`) or a tree (`TreeBlock`).

Notation as in decoder.py: the committed sequence `ids` has N tokens, the target's cache holds them all but
the last. A block is made by drafting (`draft`), fed to the target in one forward (`verify`: logits with one
row per fed draft token and one for the last committed token, repetition controls applied), read back once
with what the rule needs and what the event shows (`read`), and has its verified rows kept in the target's
cache after clipping (`keep`). The pass body in decoder.py runs these steps in that order for either shape.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from app.engine.core.detok import StreamDetokenizer
from app.engine.core.rules import Rule
from app.engine.core.sampling import TokenSampler
from app.engine.core.transfer import to_device
from app.engine.core.tree import TreeDraft, TreeLayout, TreeVerdict, row_of, verification_parents
from app.engine.core.verify import fetch
from app.engine.decoding.pass_events import (
    Commit,
    VerifiedBlock,
    block_reads,
    inspection,
    main_line,
    tree_block,
    tree_end_reads,
    tree_nodes,
    tree_reads,
)
from app.engine.drafters.base import Draft
from app.engine.drafters.chain import DrafterChain
from app.engine.events import TreeNode
from app.engine.runtime.cached_model import CachedModel
from app.engine.settings import DecodeSettings


class Block(Protocol):
    drafter: str | None  # the drafter that proposed it; None for a plain step
    k: int  # the draft length the event reports: K (chain) or the depth (tree)
    prompt_tokens: int  # committed tokens the verification forward also read (a cold request's prompt)

    def verify(self, target: CachedModel, ids: Tensor, sampler: TokenSampler) -> Tensor:
        """One target forward over the block; its logits, processed for each row's context."""

    def read(self, rule: Rule, logits: Tensor, p: Tensor, inspect: bool) -> VerifiedBlock:
        """Decide by `rule` and read back what the rule and the event need, in one transfer."""

    def keep(self, target: CachedModel, ids: Tensor, commit: Commit) -> None:
        """Keep the committed rows in the target's cache and drop the rest."""

    def nodes(self, detok: StreamDetokenizer, commit: Commit) -> tuple[tuple[TreeNode, ...] | None,
                                                                     tuple[int, ...] | None]:
        """The event's tree and its committed path (None for a chain); before the pass's texts advance `detok`."""


class ChainBlock:
    """K' <= K drafts x (K',) after the last committed token; K' = 0 is a plain decoding step."""

    def __init__(self, draft: Draft, drafter: str | None, k: int, device: torch.device) -> None:
        self.draft, self.drafter, self.k = draft, drafter, k
        self.x = to_device(draft.tokens, device)  # (K',) copied before the forward is queued, not after it
        self.prompt_tokens = 0

    @classmethod
    def drafted(cls, chain: DrafterChain, ids: Tensor, settings: DecodeSettings, k: int, sampler: TokenSampler,
                device: torch.device) -> ChainBlock:
        draft, name = chain.draft(ids, settings, k, sampler)  # x (K',), q (K', V) | None
        return cls(draft, name, k, device)

    def verify(self, target: CachedModel, ids: Tensor, sampler: TokenSampler) -> Tensor:
        rows = len(self.draft) + 1
        fed = torch.cat([ids, self.draft.tokens]) if len(self.draft) else ids
        target.crop(ids.numel() - 1)  # an earlier request's cache may hold the drafts: they are fed anyway
        logits = target.advance_to(fed, last=rows)  # (K'+1, V)
        self.prompt_tokens = target.last_fed - rows  # > 0 in a cold request's first pass
        if sampler.repetition.active:  # each row for its own context (§4.5)
            logits = sampler.process(logits, [self.x[:i] for i in range(rows)])
        return logits

    def read(self, rule: Rule, logits: Tensor, p: Tensor, inspect: bool) -> VerifiedBlock:
        ruling = rule.chain(self.x, self.draft.q, logits, p, inspect)
        shown = block_reads(self.x, p, self.draft.q, ruling.candidates, ruling.rejection, ruling.top_ids, inspect)
        host = fetch(ruling.reads | shown)  # the pass's one read
        verdict = ruling.finish(host)
        return VerifiedBlock(self.draft.tokens, verdict, inspection(host, verdict.residual is not None))

    def keep(self, target: CachedModel, ids: Tensor, commit: Commit) -> None:
        target.crop(ids.numel() + commit.kept)

    def nodes(self, detok: StreamDetokenizer, commit: Commit) -> tuple[None, None]:
        return None, None


class TreeBlock:
    """A draft tree (at most `budget` nodes, `depth` levels) verified in one forward with a tree mask (§9)."""

    def __init__(self, tree: TreeDraft, drafter: str | None, depth: int, device: torch.device) -> None:
        self.tree, self.drafter, self.k = tree, drafter, depth
        self.layout = TreeLayout.of(tree, device)  # copied before the forward is queued, not after it
        self.prompt_tokens = 0
        self._verdict: TreeVerdict | None = None
        self._host: dict[str, Tensor] = {}

    @classmethod
    def drafted(cls, chain: DrafterChain, ids: Tensor, settings: DecodeSettings, depth: int, budget: int,
                sampler: TokenSampler, device: torch.device) -> TreeBlock:
        tree, name = chain.draft_tree(ids, settings, depth, budget, sampler)
        return cls(tree, name, depth, device)

    def verify(self, target: CachedModel, ids: Tensor, sampler: TokenSampler) -> Tensor:
        tree = self.tree
        self.prompt_tokens = target.prefill(ids)
        logits = target.extend_tree(torch.cat([ids[-1:], tree.tokens]), verification_parents(tree))  # (n+1, V)
        if sampler.repetition.active:  # each row for its own path (§4.5)
            paths = [tree.tokens[:0]] + [tree.tokens[tree.path_to(node)] for node in range(len(tree))]
            logits = sampler.process(logits, paths)
        return logits

    def read(self, rule: Rule, logits: Tensor, p: Tensor, inspect: bool) -> VerifiedBlock:
        ruling = rule.tree(self.tree, self.layout, logits, p)
        shown = tree_reads(self.tree, self.layout, p, ruling.target_ids, inspect) | \
            tree_end_reads(self.tree, self.layout, ruling.end, p, inspect)
        host = self._host = fetch(ruling.reads | shown)  # the pass's one read
        verdict = self._verdict = ruling.finish(host)
        return tree_block(self.tree, verdict, main_line(self.tree, verdict), host)

    def keep(self, target: CachedModel, ids: Tensor, commit: Commit) -> None:
        assert self._verdict is not None, "read before keep"
        target.keep_path([0] + [row_of(node) for node in self._verdict.path[: commit.kept]])

    def nodes(self, detok: StreamDetokenizer, commit: Commit) -> tuple[tuple[TreeNode, ...] | None,
                                                                     tuple[int, ...] | None]:
        verdict = self._verdict
        assert verdict is not None, "read before the event"
        if not len(self.tree):
            return None, None
        return tree_nodes(detok, self.tree, verdict, self._host, commit.kept), verdict.path[: commit.kept]
