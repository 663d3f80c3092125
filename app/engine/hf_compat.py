"""The one module that reaches below transformers' public API, and the probe that says when it may.

The engine goes past transformers' documented API in a few places, for speed or for a rollback the public
cache classes do not offer. Those places change between releases, so they all live here:

- the keyword a forward takes its KV cache by: `cache` from 5.24 on, `past_key_values` before (deprecated
  since, for removal in 5.40), and the output's field of the same name;
- what the lean forward (runtime/lean_forward.py) replays of a model's `forward`: `create_causal_mask` (whose
  keywords changed in 5.x) and the decoder-layer call;
- the cache-layer hooks: `lazy_initialization` (a layer allocates its buffers), `cumulative_length` (a static
  layer's write position), `layer_class_to_replicate` (the class a dynamic cache makes its layers of), and
  whether a cache may be cropped;
- `config._attn_implementation`, the tokenizer backend's `_decode` (core/detok.py's shortcut), the modules a
  started engine process imports ahead, and the private type `_BaseModelWithGenerate` (type checks only).

A ruff rule (banned-api, pyproject.toml) and tests/engine/test_hf_compat.py keep these names out of every other
module.

`probe(model, ...)` runs once per model, when it loads (`forward_plan` in runtime/cached_model.py): a short
prompt fed through the public forward with and without a KV cache says which keyword the cache goes by and that
the forward really uses it; the same through the growing cache (runtime/growing_cache.py) and the lean forward
says whether they give the public forward's logits. Whatever fails is not used: a transformers release this
engine was not tested with may run slower, never wrong. The outcome, a `ForwardPlan`, is what every cache of that
model reads, and its `notes` reach the next generation as notices.

Notation: T probe tokens, V vocabulary.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import transformers
from transformers import DynamicCache, StaticCache
from transformers.masking_utils import create_causal_mask

if TYPE_CHECKING:
    # What AutoModelForCausalLM.from_pretrained is declared to return: a PreTrainedModel that can also `generate`.
    from transformers.models.auto.modeling_auto import _BaseModelWithGenerate as CausalLM

__all__ = ["CausalLM", "ForwardPlan", "cache_arguments", "probe", "versions"]

CACHE_KEYWORDS = ("cache", "past_key_values")  # the current keyword first: the old one warns where both work
PROBE_IDS = (1, 2, 3, 4)  # the probe's prompt: the first T - 1 tokens fill the cache, the last is one step
# The most a cached step's logits may differ from the same row computed without a cache, as a share of the
# largest logit: rounding only (the cache holds the same keys and values, summed in another order).
CACHED_TOLERANCE = {torch.float32: 1e-4, torch.float16: 3e-2, torch.bfloat16: 6e-2}
TESTED_TRANSFORMERS = ">=5.4,<5.40"  # pyproject.toml's bounds: what the compatibility tests passed at


def versions() -> dict[str, str]:
    """The versions of the libraries a measurement depends on, for the records that bench and device check write."""
    return {"transformers": transformers.__version__, "torch": torch.__version__}


# ---- what the public API leaves out ----------------------------------------------------------------------------

def attention_implementation(model) -> str | None:
    """The attention the model was loaded with ("sdpa", "eager", "flash_attention_2", ...), or None if unknown."""
    return getattr(model.config, "_attn_implementation", None)


def output_cache(output):
    """The cache a forward returned (`cache` from transformers 5.24 on, `past_key_values` before)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def allocate_like(layer, keys: torch.Tensor, values: torch.Tensor) -> None:
    """Make a cache layer allocate its buffers for states shaped and typed like `keys` and `values`."""
    layer.lazy_initialization(keys, values)


def set_write_position(layer, position: int) -> None:
    """A static cache layer's next write starts at slot `position`."""
    layer.cumulative_length.fill_(position)


def replicating_cache(layer_class: type) -> DynamicCache:
    """A `DynamicCache` whose layers, created as a model first writes them, are instances of `layer_class`."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = layer_class
    return cache


def croppable(cache) -> bool:
    """`cache.crop` rolls this cache back (transformers before 5.17 has no `is_croppable`: then no sliding layer)."""
    said = getattr(cache, "is_croppable", None)
    if said is not None:
        return bool(said)
    return not any(getattr(layer, "is_sliding", False) for layer in getattr(cache, "layers", ()))


def static_hooks_problem(config) -> str | None:
    """Why this transformers' static cache cannot be moved by its write position, or None when it can."""
    try:
        layers = StaticCache(config=config, max_cache_len=1).layers
    except Exception as exc:  # noqa: BLE001 - a configuration transformers cannot build a static cache for
        return f"transformers builds no static cache for this model ({type(exc).__name__}: {exc})"
    if not all(isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)
               and hasattr(layer, "lazy_initialization") for layer in layers):
        return (f"transformers {transformers.__version__}'s static cache has no write position to move "
                f"(tested: transformers{TESTED_TRANSFORMERS})")
    return None


def plain_tokenizers_backend(tokenizer):
    """The `tokenizers.Tokenizer` that `tokenizer.batch_decode` ends in when nothing on the way is overridden
    (then calling it directly gives the same text, without transformers' per-call work); else None."""
    try:
        from tokenizers import Tokenizer
        from transformers import PreTrainedTokenizerBase, TokenizersBackend
    except ImportError:
        return None
    kind = type(tokenizer)
    plain = (isinstance(tokenizer, TokenizersBackend)
             and getattr(kind, "_decode", None) is getattr(TokenizersBackend, "_decode", None)
             and kind.decode is PreTrainedTokenizerBase.decode
             and kind.batch_decode is PreTrainedTokenizerBase.batch_decode)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend if plain and isinstance(backend, Tokenizer) else None


def import_ahead() -> None:
    """Import what loading any model imports (PreTrainedModel, masking, losses; fast tokenizers), where present."""
    import importlib

    for name in ("transformers.modeling_layers", "transformers.tokenization_utils_tokenizers"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # another layout: loading imports what it needs then


# ---- what the lean forward replays -----------------------------------------------------------------------------

def causal_mask(config, embeds: torch.Tensor, cache, positions: torch.Tensor):
    """transformers' causal mask for `embeds` (1, T, H) at `positions` (1, T) after `cache`, as the model's own
    forward builds it (None where attention needs none)."""
    names = _parameters(create_causal_mask)
    arguments: dict[str, Any] = {"config": config, "attention_mask": None, "position_ids": positions,
                                 _first(names, ("cache", "past_key_values")): cache,
                                 _first(names, ("inputs_embeds", "input_embeds")): embeds}
    if "cache_position" in names:
        arguments["cache_position"] = positions[0]
    return create_causal_mask(**arguments)


def run_decoder_layer(layer, states: torch.Tensor, mask, rope, positions: torch.Tensor, cache) -> torch.Tensor:
    """One decoder layer as the model's forward calls it: states (1, T, H) in, (1, T, H) out; writes `cache`."""
    names = _parameters(type(layer).forward)
    arguments: dict[str, Any] = {"attention_mask": mask, "position_embeddings": rope, "position_ids": positions,
                                 _first(names, ("cache", "past_key_values")): cache, "use_cache": True}
    if "cache_position" in names:
        arguments["cache_position"] = positions[0]
    return layer(states, **arguments)


@functools.lru_cache(maxsize=64)
def _parameters(function: Callable) -> frozenset[str]:
    return frozenset(inspect.signature(function).parameters)


def _first(names: frozenset[str], candidates: tuple[str, ...]) -> str:
    """The first of `candidates` among `names` (the first candidate where none is, as **kwargs takes it)."""
    return next((name for name in candidates if name in names), candidates[0])


# ---- the probe -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ForwardPlan:
    """How a model's forwards run on this transformers, as `probe` found."""

    cache_keyword: str | None  # the keyword its forward takes the cache by; None: no keyword works
    lean: bool  # chain forwards may skip the forward's wrappers (lean_forward.py)
    growing: bool  # the dynamic cache may append into buffers grown by doubling (growing_cache.py)
    notes: tuple[str, ...] = ()  # what fell back to the public path, and why

    def cache_arguments(self, cache) -> dict[str, Any]:
        """The forward's keyword arguments that pass `cache`."""
        if self.cache_keyword is None:
            raise RuntimeError("this model's forward takes no KV cache on this transformers (the probe's notes say "
                               "why)")
        return {self.cache_keyword: cache}

    @property
    def path(self) -> str:
        """The chain forward chosen, in words: 'lean forward' or 'public forward'."""
        return "lean forward" if self.lean else "public forward"


_PLANS: weakref.WeakKeyDictionary[torch.nn.Module, ForwardPlan] = weakref.WeakKeyDictionary()
_KEYWORDS: weakref.WeakKeyDictionary[torch.nn.Module, tuple[str | None, tuple[str, ...]]] = \
    weakref.WeakKeyDictionary()


def cache_arguments(model, cache) -> dict[str, Any]:
    """The keyword arguments that pass `cache` to `model`'s forward on this transformers (probed once)."""
    keyword, notes = _probed_keyword(model)
    if keyword is None:
        raise RuntimeError("; ".join(notes))
    return {keyword: cache}


def probe(model, lean: Callable[[], Any] | None = None, growing: Callable[[], Any] | None = None) -> ForwardPlan:
    """The model's `ForwardPlan`, probed at the first call and remembered for the model's lifetime.

    `lean` builds the model's lean forward (None where it is not offered) and `growing` an empty growing cache;
    each is used only if its logits match the public forward's on the probe prompt."""
    plan = _PLANS.get(model)
    if plan is None:
        plan = _PLANS[model] = _probe(model, lean, growing)
    return plan


def forget(model) -> None:
    """Probe `model` again at the next `probe` (tests that change what the probe depends on)."""
    _PLANS.pop(model, None)
    _KEYWORDS.pop(model, None)


def _probed_keyword(model) -> tuple[str | None, tuple[str, ...]]:
    """`_cache_keyword` of the probe prompt, remembered for the model's lifetime."""
    found = _KEYWORDS.get(model)
    if found is None:
        ids, tolerance = _probe_prompt(model)
        with torch.inference_mode():
            reference = model(input_ids=ids, use_cache=False).logits[0, -1].float()  # (V,) no cache at all
            keyword, notes = _cache_keyword(model, ids, reference, tolerance)
        found = _KEYWORDS[model] = (keyword, tuple(notes))
    return found


def _probe_prompt(model) -> tuple[torch.Tensor, float]:
    """The probe's token ids (1, T) on the model's device, and the rounding a cached step may differ by."""
    device = next(model.parameters()).device
    vocab = int(model.get_input_embeddings().weight.shape[0])
    tolerance = CACHED_TOLERANCE.get(model.dtype, max(CACHED_TOLERANCE.values()))
    return torch.tensor([PROBE_IDS], device=device) % vocab, tolerance


def _probe(model, lean: Callable[[], Any] | None, growing: Callable[[], Any] | None) -> ForwardPlan:
    keyword, said = _probed_keyword(model)
    notes = list(said)
    if keyword is None:
        return ForwardPlan(None, False, False, tuple(notes))
    ids, tolerance = _probe_prompt(model)
    with torch.inference_mode():
        public = _public_logits(model, ids, keyword, DynamicCache())  # (T, V)
        uses_growing = growing is not None and _agrees("the growing cache", notes, public, tolerance,
                                                       lambda: _public_logits(model, ids, keyword, growing()))
        candidate = lean() if lean is not None else None
        uses_lean = candidate is not None and _agrees("the lean forward", notes, public, tolerance,
                                                      lambda: _lean_logits(candidate, ids, DynamicCache()))
    return ForwardPlan(keyword, uses_lean, uses_growing, tuple(notes))


def _cache_keyword(model, ids: torch.Tensor, reference: torch.Tensor,
                   tolerance: float) -> tuple[str | None, list[str]]:
    """The first keyword whose cache the forward fills and reads (its step's logits match `reference`)."""
    tried = []
    for keyword in CACHE_KEYWORDS:
        cache = DynamicCache()
        try:
            logits = _public_logits(model, ids, keyword, cache)[-1]
        except Exception as exc:  # noqa: BLE001 - a keyword this release does not take, or ignores
            tried.append(f"{keyword}=: {type(exc).__name__}: {_first_line(exc)}")
            continue
        if _close(logits, reference, tolerance):
            return keyword, []
        tried.append(f"{keyword}=: the cached step gives other logits")
    return None, [f"transformers {transformers.__version__} runs this model with no KV cache the engine can pass "
                  f"({'; '.join(tried)}); install transformers{TESTED_TRANSFORMERS}"]


def _public_logits(model, ids: torch.Tensor, keyword: str, cache) -> torch.Tensor:
    """Logits (T, V) float32 of the probe prompt through the public forward: T - 1 tokens, then one step."""
    steps = (ids[:, :-1], ids[:, -1:])
    logits, start = [], 0
    for fed in steps:
        positions = torch.arange(start, start + fed.shape[1], device=ids.device)[None]
        out = model(input_ids=fed, position_ids=positions, use_cache=True, **{keyword: cache})
        logits.append(out.logits[0].float())
        start += fed.shape[1]
    if cache.get_seq_length() != ids.shape[1]:
        raise RuntimeError("the forward did not write the cache it was given")
    return torch.cat(logits)


def _lean_logits(lean, ids: torch.Tensor, cache) -> torch.Tensor:
    """`_public_logits` through a lean forward."""
    steps = (ids[:, :-1], ids[:, -1:])
    logits, start = [], 0
    for fed in steps:
        positions = torch.arange(start, start + fed.shape[1], device=ids.device)[None]
        out, _ = lean(fed, positions, cache)
        logits.append(out[0].float())
        start += fed.shape[1]
    return torch.cat(logits)


def _agrees(what: str, notes: list[str], public: torch.Tensor, tolerance: float,
            logits: Callable[[], torch.Tensor]) -> bool:
    """Whether `logits()` (T, V) gives the public forward's `public` to rounding (`tolerance`); a note if not."""
    try:
        mine = logits()
    except Exception as exc:  # noqa: BLE001 - whatever this release changed, the public forward still runs
        notes.append(f"{what} fails on transformers {transformers.__version__} ({type(exc).__name__}: "
                     f"{_first_line(exc)}): chains run the model's own forward, which may be slower")
        return False
    if mine.shape == public.shape and _close(mine, public, tolerance):
        return True
    notes.append(f"{what} gives other logits than the model's forward on transformers {transformers.__version__}: "
                 "chains run the model's own forward, which may be slower")
    return False


def _close(mine: torch.Tensor, reference: torch.Tensor, tolerance: float) -> bool:
    """Equal to `tolerance` times the largest logit."""
    scale = float(reference.abs().max()) + 1e-6
    return bool(torch.isfinite(mine).all()) and float((mine - reference).abs().max()) <= tolerance * scale


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else "no details"
