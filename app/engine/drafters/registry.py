"""Every drafter the playground knows, in one table.

An entry says what a drafter is called (the name used by the settings, the
command line and the events), how the window labels it, how it is built from
the loaded models and the drafter options, what it is built *from* (its
configuration fingerprint: a changed value means the decoder must rebuild it)
and whether the loaded models can run it. Adding a drafter is adding a row.

Learned heads (`head` set) are trained for one target and come from a heads
folder (`heads/format.py`); they are available when such a head was loaded.

This module imports no torch: the command line and the window's process list
drafters without loading the engine. Builders import their drafter when called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from app.engine.settings import NO_DRAFTER, DrafterOptions, SettingsError

if TYPE_CHECKING:  # not imported at run time: they load torch
    from transformers import PreTrainedModel

    from app.engine.drafters.base import Drafter
    from app.engine.runtime.execution import Execution


class LearnedHead(Protocol):
    """A head loaded for this target (heads/format.py `HeadSpec`): it builds a fresh drafter on its weights."""

    def build(self, models: Models, options: DrafterOptions) -> Drafter: ...


class Models(Protocol):
    """What building a drafter reads of the loaded models (app/engine/loading/models.py `LoadedModels`).

    The drafters sit below loading: they see the models through this, never through loading's own types.
    """

    @property
    def target(self) -> PreTrainedModel: ...
    @property
    def target_name(self) -> str: ...
    @property
    def draft(self) -> PreTrainedModel | None: ...
    @property
    def heads(self) -> Mapping[str, LearnedHead]: ...  # by drafter name
    @property
    def execution(self) -> Execution: ...
    @property
    def default_exit_layer(self) -> int: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...


def _no_options(models: Models, options: DrafterOptions) -> tuple:
    return ()


def _always(models: Models) -> bool:
    return True


@dataclass(frozen=True)
class DrafterEntry:
    name: str
    label: str  # shown in the window's drafter list
    build: Callable[[Models, DrafterOptions], Drafter]
    fingerprint: Callable[[Models, DrafterOptions], tuple] = _no_options  # what the drafter is built from
    available: Callable[[Models], bool] = _always  # whether these loaded models can run it
    head: str | None = None  # learned heads: the module of the family (heads/format.py loads its weights)
    branches: bool = False  # proposes token trees (`propose_tree`, docs/ALGORITHMS.md §9.2); else chains only


# ---- builders -----------------------------------------------------------------------------------


def _draft_model(models: Models, options: DrafterOptions) -> Drafter:
    from app.engine.drafters.model_drafter import ModelDrafter

    return ModelDrafter("draft-model", models.draft, models.vocab_size, execution=models.execution)


def _prompt_lookup(models: Models, options: DrafterOptions) -> Drafter:
    from app.engine.drafters.prompt_lookup import PromptLookupDrafter

    return PromptLookupDrafter(options.lookup_max_ngram, options.lookup_min_ngram)


def _prompt_lookup_config(models: Models, options: DrafterOptions) -> tuple:
    return (options.lookup_max_ngram, options.lookup_min_ngram)


def _ngram_cache(models: Models, options: DrafterOptions) -> Drafter:
    from app.engine.drafters.ngram_cache import NgramCacheDrafter

    return NgramCacheDrafter(options.ngram_min_n, options.ngram_max_n, options.ngram_min_count,
                             options.ngram_min_share)


def _ngram_cache_config(models: Models, options: DrafterOptions) -> tuple:
    return (options.ngram_min_n, options.ngram_max_n, options.ngram_min_count, options.ngram_min_share)


def _suffix_tree(models: Models, options: DrafterOptions) -> Drafter:
    from app.engine.drafters.suffix_tree import SuffixTreeDrafter

    return SuffixTreeDrafter(options.suffix_max_depth, options.suffix_spec_factor, options.suffix_min_prob)


def _suffix_tree_config(models: Models, options: DrafterOptions) -> tuple:
    return (options.suffix_max_depth, options.suffix_spec_factor, options.suffix_min_prob)


def layer_skip_layers(models: Models, options: DrafterOptions) -> tuple[int, ...]:
    total = models.num_layers
    if total < 2:
        raise SettingsError(_why_unavailable("layer-skip", models))
    if options.layer_skip_layers is not None:
        layers = options.layer_skip_layers
    else:
        layers = tuple(range(options.layer_skip_exit or models.default_exit_layer))
    if max(layers) >= total or len(layers) >= total:
        raise SettingsError(f"layer skip: the target has {total} layers; choose fewer than that (got {list(layers)})")
    return layers


def _layer_skip(models: Models, options: DrafterOptions) -> Drafter:
    from app.engine.drafters.model_drafter import ModelDrafter

    return ModelDrafter("layer-skip", models.target, models.vocab_size, layers=layer_skip_layers(models, options),
                        execution=models.execution)


def _head(name: str, label: str, module: str, branches: bool = False) -> DrafterEntry:
    """A learned head family: built from the head loaded for this target (it owns the trained weights)."""
    return DrafterEntry(name, label, build=lambda models, options: models.heads[name].build(models, options),
                        available=lambda models: name in models.heads, head=module, branches=branches)


# ---- the table ----------------------------------------------------------------------------------

DRAFTERS: tuple[DrafterEntry, ...] = (
    DrafterEntry("draft-model", "Draft model", _draft_model, available=lambda models: models.draft is not None,
                 branches=True),
    DrafterEntry("prompt-lookup", "Prompt lookup", _prompt_lookup, _prompt_lookup_config, branches=True),
    DrafterEntry("ngram-cache", "N-gram cache", _ngram_cache, _ngram_cache_config, branches=True),
    DrafterEntry("suffix-tree", "Suffix tree", _suffix_tree, _suffix_tree_config, branches=True),
    DrafterEntry("layer-skip", "Layer skip (self-speculative)", _layer_skip, layer_skip_layers,
                 available=lambda models: models.num_layers > 1, branches=True),
    _head("medusa", "Medusa heads", "app.engine.drafters.heads.medusa", branches=True),
    _head("mtp", "MTP modules", "app.engine.drafters.heads.mtp"),
    _head("eagle", "EAGLE head", "app.engine.drafters.heads.eagle", branches=True),
    _head("dflash", "DFlash block drafter", "app.engine.drafters.heads.dflash"),
)
BY_NAME: dict[str, DrafterEntry] = {entry.name: entry for entry in DRAFTERS}
DRAFTER_NAMES: tuple[str, ...] = tuple(BY_NAME)
DRAFTER_LABELS: dict[str, str] = {entry.name: entry.label for entry in DRAFTERS}
BRANCHING_DRAFTERS: tuple[str, ...] = tuple(entry.name for entry in DRAFTERS if entry.branches)
HEAD_FAMILIES: dict[str, str] = {entry.name: entry.head for entry in DRAFTERS if entry.head}  # name -> module


def available_drafters(models: Models) -> tuple[str, ...]:
    """The drafters these models can run: built-in ones in table order, then the heads in the order loaded."""
    builtin = tuple(entry.name for entry in DRAFTERS if entry.head is None and entry.available(models))
    return builtin + tuple(name for name in models.heads if name in HEAD_FAMILIES)


def drafter_config(name: str, models: Models, options: DrafterOptions) -> tuple:
    """What a drafter is built from; a changed value means the drafter must be rebuilt."""
    entry = BY_NAME.get(name)
    return () if entry is None else entry.fingerprint(models, options)


def _why_unavailable(name: str, models: Models) -> str:
    if name == "draft-model":
        return "no draft model is loaded (give one with --draft)"
    if name == "layer-skip":
        model_type = getattr(models.target.config, "model_type", type(models.target).__name__)
        if models.num_layers == 0:
            return (f"layer skip needs the target's list of decoder layers, and this architecture ({model_type}) "
                    "keeps them where layer skip does not look (model.layers, transformer.h, gpt_neox.layers, "
                    "model.decoder.layers, transformer.layers)")
        return f"layer skip needs a target with more than one decoder layer; this one ({model_type}) has one"
    if name in HEAD_FAMILIES:
        from app.engine.drafters.published.formats import READS, checkpoint_option

        published = f", or a published checkpoint with {checkpoint_option(name)}" if name in READS else ""
        return f"no trained head of this family is loaded for this target (give a heads folder with --heads{published})"
    return "unknown drafter"


def build_drafter(name: str, models: Models, options: DrafterOptions) -> Drafter:
    available = available_drafters(models)
    if name not in available:
        raise SettingsError(f"drafter {name!r} cannot run here: {_why_unavailable(name, models)}; "
                            f"available: {', '.join(available)}, {NO_DRAFTER}")
    return BY_NAME[name].build(models, options)
