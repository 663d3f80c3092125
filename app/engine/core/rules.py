"""The verification rules as objects a pass asks, one per `DecodeSettings.verify`: `Greedy` (§3),
`Sampling` (§4) and `Asd` (§5), which owns the request's ledger.

Notation as in verify.py (chains) and tree.py (trees). These objects only choose and call the pure rules
there: `chain` queues a chain block's device work and returns its `Ruling` (read back with the pass's event
numbers in one transfer), `tree` does the same for a tree block (greedy: the argmax, then the host walks
the tree; sampling: the whole walk on the device), `charge` books the kept block into the rule's state.
INSPECT_TOP and the ASD block start live here too: the greedy rule finds the inspector's top entries in its
own search, and ASD's charge returns its start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from app.engine.core import rowwise
from app.engine.core.tree import TreeDraft, TreeEnd, TreeLayout, TreeVerdict, greedy_tree_verdict, sampled_walk
from app.engine.core.verify import (
    Ruling,
    Verdict,
    asd_charge,
    asd_reused,
    asd_ruling,
    asd_saved,
    greedy_ruling,
    sampling_ruling,
)
from app.engine.events import AsdSummary, Ledger
from app.engine.settings import AsdSettings, DecodeSettings

INSPECT_TOP = 8  # entries of p, q and the residual kept per row for the pass inspector


@dataclass(frozen=True)
class AsdBlockStart:
    """The ASD ledger and knobs in force when the block was verified."""

    remaining: float  # rem = B - s at block start
    settings: AsdSettings


@dataclass(frozen=True, eq=False)
class TreeRuling:
    """A tree rule as far as the device takes it: what the host reads with the event's numbers (each row's
    argmax among them), how it finishes from its copies, and where a sampled walk ended."""

    reads: dict[str, Tensor]  # device tensors `finish` needs, by name; "target_ids" (n+1,) long: argmax z or p
    finish: Callable[[Mapping[str, Tensor]], TreeVerdict]  # their host copies -> the verdict
    end: TreeEnd | None = None  # sampling: the walk's end on the device, for the event's numbers

    @property
    def target_ids(self) -> Tensor:
        return self.reads["target_ids"]


class Rule(Protocol):
    def chain(self, x: Tensor, q: Tensor | None, logits: Tensor, p: Tensor, inspect: bool) -> Ruling:
        """The rule's device work for drafts x (K',) on the device, q (K', V) or None, logits and p (K'+1, V)."""

    def tree(self, tree: TreeDraft, layout: TreeLayout, logits: Tensor, p: Tensor) -> TreeRuling:
        """The device work for the accepted path of a tree (its indices on the device); logits and p (n+1, V)."""

    def charge(self, verdict: Verdict, kept: int) -> AsdBlockStart | None:
        """Book the `kept` drafts of a block; ASD's ledger as it stood at block start (None: no ledger)."""


class Greedy:
    """§3: accept while the draft is the target's argmax."""

    def chain(self, x: Tensor, q: Tensor | None, logits: Tensor, p: Tensor, inspect: bool) -> Ruling:
        return greedy_ruling(x, logits, top=INSPECT_TOP if inspect else 1)  # the inspector's rows in the same search

    def tree(self, tree: TreeDraft, layout: TreeLayout, logits: Tensor, p: Tensor) -> TreeRuling:
        def finish(host: Mapping[str, Tensor]) -> TreeVerdict:
            y = host["target_ids"]
            return greedy_tree_verdict(tree, y.tolist(), y)

        return TreeRuling({"target_ids": rowwise.argmax(logits)}, finish)

    def charge(self, verdict: Verdict, kept: int) -> AsdBlockStart | None:
        return None


class Sampling:
    """§4: lossless speculative sampling, drawing from the request's generator (on the device)."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def chain(self, x: Tensor, q: Tensor | None, logits: Tensor, p: Tensor, inspect: bool) -> Ruling:
        u = torch.rand(x.numel(), generator=self.generator, device=logits.device)  # (K',)
        return sampling_ruling(x, p, q, u, self.generator)

    def tree(self, tree: TreeDraft, layout: TreeLayout, logits: Tensor, p: Tensor) -> TreeRuling:
        """The whole walk on the device, the draws included (tree.py): read with the pass's one read."""
        walk = sampled_walk(tree, layout, p, self.generator)
        return TreeRuling(walk.reads, walk.finish, walk.end)

    def charge(self, verdict: Verdict, kept: int) -> AsdBlockStart | None:
        return None


class Asd(Greedy):
    """§5: greedy that may accept a mismatch its budget affords; owns the request's ledger s (§5.6 figures too).

    ASD is a chain rule (the settings refuse a tree under it); a block without regrets charges nothing.
    """

    def __init__(self) -> None:
        self.knobs = AsdSettings()  # B, g, M of the current pass
        self.spent = 0.0  # s
        self.exceptions = 0
        self.reused = 0  # matches kept after an exception (§5.6)
        self.saved = 0  # drafts kept beyond strict greedy on the same logits (§5.6)
        self.budget: float | None = None  # B of the last ASD block; None if no block was verified under ASD

    def chain(self, x: Tensor, q: Tensor | None, logits: Tensor, p: Tensor, inspect: bool) -> Ruling:
        knobs = self.knobs
        return asd_ruling(x, logits, knobs.budget - self.spent, knobs.gate, knobs.cap)

    def charge(self, verdict: Verdict, kept: int) -> AsdBlockStart | None:
        """s += regret of the kept exceptions."""
        if verdict.mismatch is None:  # not verified by this rule: nothing to charge
            return None
        start = AsdBlockStart(remaining=self.knobs.budget - self.spent, settings=self.knobs)
        self.spent += asd_charge(verdict, kept)
        self.exceptions += sum(verdict.is_exception(i) for i in range(kept))
        self.reused += asd_reused(verdict, kept)
        self.saved += asd_saved(verdict, kept)
        self.budget = self.knobs.budget
        return start

    def ledger(self, start: AsdBlockStart | None) -> Ledger:
        return Ledger(self.spent, 0.0 if start is None else start.settings.budget, self.exceptions)

    def summary(self, passes: int, tokens: int) -> AsdSummary | None:
        """What ASD bought over the request (§5.6): passes saved = passes * saved / (tokens - saved)."""
        if self.budget is None:
            return None
        strict_tokens = tokens - self.saved  # what strict greedy would have committed in the same passes
        passes_saved = passes * self.saved / strict_tokens if strict_tokens > 0 else 0.0
        return AsdSummary(exceptions=self.exceptions, spent=self.spent, budget=self.budget,
                          remaining=self.budget - self.spent, reused=self.reused, saved=self.saved,
                          passes_saved=passes_saved)


class Rules:
    """The rules of one request: the one `settings.verify` names is asked each pass, and ASD's ledger lasts."""

    def __init__(self, generator: torch.Generator) -> None:
        self.asd = Asd()
        self._by_name: dict[str, Rule] = {"greedy": Greedy(), "sample": Sampling(generator), "asd": self.asd}

    def pick(self, settings: DecodeSettings) -> Rule:
        self.asd.knobs = settings.asd
        return self._by_name[settings.verify]
