"""Drafters by name, built from the loaded models and the drafter options."""

from __future__ import annotations

from app.engine.drafters.base import Draft, Drafter
from app.engine.drafters.model_drafter import ModelDrafter
from app.engine.drafters.ngram_cache import NgramCacheDrafter
from app.engine.drafters.prompt_lookup import PromptLookupDrafter
from app.engine.settings import DrafterOptions, SettingsError

BUILTIN_DRAFTERS = ("draft-model", "prompt-lookup", "ngram-cache", "layer-skip")


def layer_skip_layers(models, options: DrafterOptions) -> tuple[int, ...]:
    total = models.num_layers
    if options.layer_skip_layers is not None:
        layers = options.layer_skip_layers
    else:
        layers = tuple(range(options.layer_skip_exit or models.default_exit_layer))
    if max(layers) >= total or len(layers) >= total:
        raise SettingsError(f"layer skip: the target has {total} layers; choose fewer than that (got {list(layers)})")
    return layers


def drafter_config(name: str, models, options: DrafterOptions) -> tuple:
    """What a drafter is built from; a changed value means the drafter must be rebuilt."""
    if name == "prompt-lookup":
        return (options.lookup_max_ngram, options.lookup_min_ngram)
    if name == "ngram-cache":
        return (options.ngram_min_n, options.ngram_max_n, options.ngram_min_count, options.ngram_min_share)
    if name == "layer-skip":
        return layer_skip_layers(models, options)
    return ()


def build_drafter(name: str, models, options: DrafterOptions) -> Drafter:
    if name not in models.available_drafters:
        known = ", ".join(models.available_drafters)
        raise SettingsError(f"unknown or unavailable drafter {name!r}; available: {known}, none")
    if name == "draft-model":
        return ModelDrafter(name, models.draft, models.vocab_size)
    if name == "prompt-lookup":
        return PromptLookupDrafter(options.lookup_max_ngram, options.lookup_min_ngram)
    if name == "ngram-cache":
        return NgramCacheDrafter(options.ngram_min_n, options.ngram_max_n, options.ngram_min_count,
                                 options.ngram_min_share)
    if name == "layer-skip":
        return ModelDrafter(name, models.target, models.vocab_size, layers=layer_skip_layers(models, options))
    return models.extras[name].build(models, options)


__all__ = ["Draft", "Drafter", "BUILTIN_DRAFTERS", "build_drafter", "drafter_config"]
