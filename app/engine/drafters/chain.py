"""The fallback chain: the drafters named in the settings, asked in order until one proposes.

A drafter that fails (an exception, out of memory) is reported once and skipped for the rest of the
request; the others go on drafting. Built drafters are kept between requests while their configuration
holds, so their caches (a draft model's KV cache, n-gram tables) survive from one generation to the next.
The chain also decides which of the target's hidden states are kept: those its drafters read, and only those.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import torch

from app.engine.core.sampling import TokenSampler
from app.engine.core.tree import TreeDraft
from app.engine.drafters.base import Draft, Drafter, can_branch
from app.engine.drafters.registry import Models, build_drafter, drafter_config
from app.engine.errors import EngineError, is_out_of_memory, release_memory
from app.engine.settings import DecodeSettings, SettingsError

if TYPE_CHECKING:
    from app.engine.runtime.cached_model import CachedModel

Proposal = TypeVar("Proposal", Draft, TreeDraft)
NO_DRAFT = Draft(torch.empty(0, dtype=torch.long), None)  # K' = 0: the pass is one plain decoding step


class DrafterChain:
    """The drafters of one pair of loaded models, asked in the order of `settings.drafters`."""

    def __init__(self, models: Models, target: CachedModel) -> None:
        self.models = models
        self.target = target
        self._built: dict[str, tuple[tuple, Drafter]] = {}  # name -> (configuration, drafter)
        self.failed: set[str] = set()  # skipped for the rest of the request
        self._report: Callable[[str], None] = lambda problem: None

    def begin_request(self, report: Callable[[str], None]) -> None:
        """A new request: every drafter gets another chance, and `report(problem)` hears of each failure."""
        self.failed.clear()
        self._report = report

    def forget(self) -> None:
        """Drop every drafter and its cache."""
        self._built.clear()

    def keep_target_features(self, ids: torch.Tensor, settings: DecodeSettings) -> None:
        """Keep the target's hidden states the chain's drafters read, and only those; feed the target the
        committed tokens `ids` (N,) but the last when some are read."""
        needed: set[int] = set()
        for name in settings.drafters:
            if name not in self.failed:
                try:
                    needed.update(self._drafter(name, settings).feature_layers)
                except Exception as exc:  # noqa: BLE001 - reported like any drafter failure
                    self._drop(name, exc)
        if tuple(sorted(needed)) != self.target.feature_layers:
            self.target.keep_features(needed)
        if needed:  # the drafters read the target's features of every committed token but the last
            self.target.prefill(ids)

    def draft(self, ids: torch.Tensor, settings: DecodeSettings, k: int,
              sampler: TokenSampler) -> tuple[Draft, str | None]:
        """At most k tokens after `ids` from the first drafter that proposes (none: an empty draft), and its name."""
        if k == 0:
            return NO_DRAFT, None
        draft, name = self._first_proposal(
            ids, settings, lambda drafter, features: drafter.propose(ids, k, sampler, features))
        if draft is None:
            return NO_DRAFT, None
        return Draft(draft.tokens[:k], None if draft.q is None else draft.q[:k]), name

    def draft_tree(self, ids: torch.Tensor, settings: DecodeSettings, depth: int, budget: int,
                   sampler: TokenSampler) -> tuple[TreeDraft, str | None]:
        """A tree from the first drafter that proposes: its tree if it can branch, else its chain as a tree."""
        def propose(drafter: Drafter, features: list[torch.Tensor] | None) -> TreeDraft | None:
            if can_branch(drafter):
                return drafter.propose_tree(ids, depth, budget, sampler, features)  # type: ignore[attr-defined]
            draft = drafter.propose(ids, min(depth, budget), sampler, features)
            return None if draft is None else TreeDraft.chain(draft.tokens[:depth],
                                                              None if draft.q is None else draft.q[:depth])

        tree, name = self._first_proposal(ids, settings, propose)
        return (tree, name) if tree is not None else (TreeDraft.chain(torch.empty(0, dtype=torch.long)), None)

    def _first_proposal(self, ids: torch.Tensor, settings: DecodeSettings,
                        propose: Callable[[Drafter, list[torch.Tensor] | None], Proposal | None],
                        ) -> tuple[Proposal | None, str | None]:
        self.keep_target_features(ids, settings)
        for name in settings.drafters:
            if name in self.failed:
                continue
            try:
                drafter = self._drafter(name, settings)
                proposal = propose(drafter, self._features_for(drafter))
            except Exception as exc:  # noqa: BLE001 - a broken drafter must not end the generation
                self._drop(name, exc)
                continue
            if proposal is not None and len(proposal):
                return proposal, name
        return None, None

    def _drafter(self, name: str, settings: DecodeSettings) -> Drafter:
        config = drafter_config(name, self.models, settings.options)
        built = self._built.get(name)
        if built is None or built[0] != config:
            built = (config, build_drafter(name, self.models, settings.options))
            self._built[name] = built
        return built[1]

    def _features_for(self, drafter: Drafter) -> list[torch.Tensor] | None:
        if not drafter.feature_layers:
            return None
        kept = self.target.feature_layers
        return [self.target.features[kept.index(layer)] for layer in drafter.feature_layers]

    def _drop(self, name: str, exc: Exception) -> None:
        self.failed.add(name)
        self._built.pop(name, None)  # its cache goes with it
        if is_out_of_memory(exc):
            release_memory(exc)
            detail = "out of memory; its memory was released"
        elif isinstance(exc, EngineError | SettingsError):
            detail = str(exc)
        else:
            detail = f"{type(exc).__name__}: {exc}"
        self._report(f"drafter {name} failed and is skipped for this generation ({detail})")
