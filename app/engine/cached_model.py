"""One causal LM with its own KV cache, kept equal to a prefix of a token sequence.

`advance_to(ids)` is the only way forward: it crops the cache back to the
longest prefix it shares with `ids` (a rollback after rejected drafts), then
feeds the rest and returns the logits of the fed tokens. So whoever owns a
CachedModel never tracks what was accepted; it just says where the sequence is
now. A layer subset turns the target itself into a self-speculative drafter
(LayerSkip): only those layers run, then the model's own final norm and head.

Token trees (docs/ALGORITHMS.md §9) add a *tail*: `extend_tree` feeds rows that
hang off the sequence, each seeing the whole sequence, its tail ancestors and
itself (a 4D attention mask), at position `length + (tail ancestors)`. The
tail is then either kept as one path (`keep_path`: the accepted nodes' keys
and values are moved next to the sequence, nothing is recomputed) or dropped;
every other call drops it first.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from app.engine.tree import TreeRows

_LAYER_LISTS = ("model.layers", "transformer.h", "gpt_neox.layers", "model.decoder.layers", "transformer.layers")


def _resolve(obj, dotted: str):
    for name in dotted.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def find_layer_list(model) -> tuple[object, str, nn.ModuleList] | None:
    """(owner module, attribute, decoder layers) of a decoder-only HF model, if recognised."""
    for dotted in _LAYER_LISTS:
        layers = _resolve(model, dotted)
        if isinstance(layers, nn.ModuleList):
            owner_path, attribute = dotted.rsplit(".", 1)
            return _resolve(model, owner_path), attribute, layers
    return None


@contextmanager
def only_layers(model, keep: Sequence[int] | None):
    """Temporarily run `model` with only the decoder layers `keep` (in order)."""
    if keep is None:
        yield
        return
    found = find_layer_list(model)
    assert found is not None, "layer subsets are offered only for models whose layer list is recognised"
    owner, attribute, layers = found
    setattr(owner, attribute, nn.ModuleList([layers[i] for i in keep]))
    try:
        yield
    finally:
        setattr(owner, attribute, layers)


class TreeAttentionUnsupported(RuntimeError):
    """The model cannot verify a token tree in one forward (no custom 4D masks, or a cache it cannot compact)."""


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(a.numel(), b.numel())
    differs = (a[:n] != b[:n]).nonzero()
    return int(differs[0]) if differs.numel() else n


class CachedModel:
    """A model and the token ids whose keys and values sit in its cache."""

    def __init__(self, model, layers: Sequence[int] | None = None) -> None:
        self.model = model
        self.layers = tuple(layers) if layers is not None else None
        self.device = next(model.parameters()).device
        self.feature_layers: tuple[int, ...] = ()
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.reset()

    def reset(self) -> None:
        self.cache = DynamicCache()
        self.ids = torch.empty(0, dtype=torch.long)  # (L,) on CPU
        self.features: list[torch.Tensor] = []  # per feature layer: (L, H) hidden states aligned with the cache
        self._tail = TreeRows()

    def keep_features(self, layers: Iterable[int]) -> None:
        """Also keep these hidden states (indices into HF `hidden_states`, 0 = embeddings) for every cached token.

        Changing the set forgets the cache, so the next `advance_to` recomputes the prefix with them.
        """
        layers = tuple(sorted(set(layers)))
        if layers != self.feature_layers:
            self.feature_layers = layers
            self.reset()

    @property
    def length(self) -> int:
        return self.ids.numel()

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens."""
        self.drop_tail()
        if length >= self.length:
            return
        if length == 0 or not self.cache.is_croppable:
            kept = self.ids[:length]
            self.reset()
            if length:
                self.extend(kept)
            return
        self.cache.crop(length - self.length)  # transformers accepts only a negative count here
        self.ids = self.ids[:length]
        self.features = [f[:length] for f in self.features]

    def extend(self, new_ids: torch.Tensor, output_hidden_states: bool = False, last: int | None = None):
        """Feed `new_ids` (T,) after the cached tokens; logits (T, V) float32 (and hidden states).

        With `last`, only the logits of the last `last` fed tokens are needed: models that take
        `logits_to_keep` then skip the head for the other rows (T may come back smaller than T).
        """
        self.drop_tail()
        start = self.length
        positions = torch.arange(start, start + new_ids.numel(), device=self.device)
        head = {"logits_to_keep": last} if last is not None and self._keeps_logits and last < new_ids.numel() else {}
        with torch.inference_mode(), only_layers(self.model, self.layers):
            out = self.model(
                input_ids=new_ids.to(self.device)[None],
                position_ids=positions[None],
                cache=self.cache,
                use_cache=True,
                output_hidden_states=output_hidden_states or bool(self.feature_layers),
                **head,
            )
        self.ids = torch.cat([self.ids, new_ids.cpu()])
        logits = out.logits[0].float()  # (T, V)
        if self.feature_layers:
            fresh = [out.hidden_states[i][0] for i in self.feature_layers]  # each (T, H)
            self.features = [torch.cat([old, new]) for old, new in zip(self.features, fresh, strict=True)] \
                if self.features else fresh
        if output_hidden_states:
            return logits, tuple(h[0] for h in out.hidden_states)
        return logits

    def advance_to(self, ids: torch.Tensor, output_hidden_states: bool = False, last: int | None = None):
        """Make the cache hold `ids` (N,); logits of the tokens that had to be fed (of at most `last` of them).

        At least the last token is always fed, so the last row scores what follows `ids`.
        """
        keep = min(common_prefix_length(self.ids, ids), ids.numel() - 1)
        self.crop(keep)
        return self.extend(ids[keep:], output_hidden_states=output_hidden_states, last=last)

    # ---- token trees ------------------------------------------------------------------------

    def extend_tree(self, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """Feed tail rows `tokens` (T,); `parents` (T,) index earlier tail rows (-1: the row hangs off the
        sequence). Logits (T, V) float32; each row sees the sequence, its tail ancestors and itself."""
        self._require_tree_support()
        tail = self._tail
        tail.add(tokens.cpu(), parents.cpu())
        new = slice(len(tail) - tokens.numel(), len(tail))
        positions = (self.length + tail.depths[new]).to(self.device)  # (T,)
        visible = torch.cat([torch.ones(tokens.numel(), self.length, dtype=torch.bool),
                             tail.sees[new]], dim=1)  # (T, L + tail)
        dtype = self.model.dtype
        mask = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)
        with torch.inference_mode(), only_layers(self.model, self.layers):
            out = self.model(
                input_ids=tokens.to(self.device)[None],
                position_ids=positions[None],
                attention_mask=mask.to(self.device)[None, None],  # (1, 1, T, L + tail)
                cache=self.cache,
                use_cache=True,
                output_hidden_states=bool(self.feature_layers),
            )
        if self.feature_layers:
            fresh = [out.hidden_states[i][0] for i in self.feature_layers]  # each (T, H)
            tail.features = [torch.cat([old, f]) for old, f in zip(tail.features, fresh, strict=True)] \
                if tail.features else fresh
        return out.logits[0].float()

    def keep_path(self, rows: list[int]) -> None:
        """Keep tail rows `rows` (a root-to-node path, in order) as the next tokens of the sequence; drop the rest.

        The kept rows' keys and values (and features) are moved in place next to the sequence: they were
        computed at exactly the positions the path's tokens now occupy, seeing exactly their prefix.
        """
        tail = self._tail
        length = self.length
        if rows != list(range(len(rows))):  # a path of the first rows already sits where it belongs
            keep = torch.tensor([length + r for r in rows], device=self.device)
            with torch.inference_mode():
                for layer in self.cache.layers:
                    assert isinstance(layer, DynamicLayer), "tree_problem() admits full-attention layers only"
                    for states in (layer.keys, layer.values):  # each (B, heads, L + tail, d)
                        assert states is not None
                        states[..., length: length + len(rows), :] = states.index_select(-2, keep)
        if tail.features:
            kept = torch.tensor(rows, dtype=torch.long, device=tail.features[0].device)
            self.features = [torch.cat([f, t.index_select(0, kept)]) for f, t in
                             zip(self.features, tail.features, strict=True)] if self.features else \
                [t.index_select(0, kept) for t in tail.features]
        path_ids = tail.tokens[torch.tensor(rows, dtype=torch.long)] if rows else tail.tokens[:0]
        if len(tail) > len(rows):
            self.cache.crop(len(rows) - len(tail))
        self.ids = torch.cat([self.ids, path_ids])
        self._tail = TreeRows()

    def drop_tail(self) -> None:
        """Forget the tail rows: the cache holds the sequence alone again."""
        if len(self._tail):
            self.cache.crop(-len(self._tail))
            self._tail = TreeRows()

    def tree_problem(self) -> str | None:
        """Why this model cannot verify a token tree in one forward, or None when it can."""
        implementation = getattr(self.model.config, "_attn_implementation", None)
        if implementation not in (None, "eager", "sdpa"):
            return (f"token trees need custom attention masks, which this model's {implementation} attention "
                    "does not take (load it with sdpa or eager attention)")
        if getattr(self.model.config, "sliding_window", None) or \
                any(getattr(layer, "is_sliding", False) for layer in self.cache.layers):
            return "token trees need a cache whose entries can be moved, and this model's sliding-window cache cannot"
        return None

    def _require_tree_support(self) -> None:
        problem = self.tree_problem()
        if problem is not None:
            raise TreeAttentionUnsupported(problem)
