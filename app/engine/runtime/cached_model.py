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

Chain forwards on the dynamic cache skip the wrappers of the model's `forward` where it allows
(`lean_forward.py`: the same modules, the same numbers), and the dynamic cache appends by writing the new
rows into buffers grown by doubling, not by concatenating the whole cache (`growing_cache.py`).

The cache is dynamic or static (`app/engine/runtime/execution.py`, `static_cache.py`). On the static path a crop is
a move of the write position, every forward gets a 4D mask over the cache's capacity, and, when compiling,
the short forwards run compiled with their rows padded to a power of two (the padding rows write past the
sequence, where the next forward overwrites them). `warm_up` compiles one such forward ahead, through the
same path, so that loading can compile every shape a generation will meet.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from types import MethodType

import torch
from torch import nn
from transformers import DynamicCache, DynamicLayer, StaticLayer

from app.engine import hf_compat
from app.engine.core.transfer import to_device
from app.engine.core.tree import TreeRows
from app.engine.errors import ModelLoadError, is_out_of_memory
from app.engine.runtime.execution import (
    COMPILED_ROWS,
    Execution,
    compile_step,
    mark_rows_dynamic,
    padded_rows,
    run_warm,
    warm_call,
)
from app.engine.runtime.growing_cache import growing_cache
from app.engine.runtime.lean_forward import lean_forward
from app.engine.runtime.static_cache import MIN_CAPACITY, StaticKV, compiled_capacity, static_problem

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


def layer_subset(model, keep: Sequence[int]) -> nn.ModuleList:
    """The decoder layers `keep` of `model`, in order."""
    found = find_layer_list(model)
    assert found is not None, "layer subsets are offered only for models whose layer list is recognised"
    return nn.ModuleList([found[2][i] for i in keep])


@contextmanager
def only_layers(model, keep: Sequence[int] | nn.ModuleList | None):
    """Temporarily run `model` with only the decoder layers `keep` (indices in order, or a `layer_subset` built
    once, which spares building it at every forward)."""
    if keep is None:
        yield
        return
    found = find_layer_list(model)
    assert found is not None, "layer subsets are offered only for models whose layer list is recognised"
    owner, attribute, layers = found
    setattr(owner, attribute, keep if isinstance(keep, nn.ModuleList) else layer_subset(model, keep))
    try:
        yield
    finally:
        setattr(owner, attribute, layers)


def forward_plan(model, execution: Execution, who: str) -> hf_compat.ForwardPlan:
    """How `model`'s forwards run on this transformers: probed at its first call (at load), then remembered.

    What fell back to the public forward is said in `execution`'s notices; a model that takes no KV cache on this
    transformers is refused (ModelLoadError)."""
    plan = hf_compat.probe(model, lean=lambda: lean_forward(model), growing=growing_cache)
    if plan.cache_keyword is None:
        raise ModelLoadError(f"{who}: " + "; ".join(plan.notes))
    for note in plan.notes:
        execution.note(f"{who}: {note}")
    return plan


class TreeAttentionUnsupported(RuntimeError):
    """The model cannot verify a token tree in one forward (no custom 4D masks, or a cache it cannot compact)."""


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(a.numel(), b.numel())
    if torch.equal(a[:n], b[:n]):  # the usual case, a cache that holds a prefix of the ids: one comparison
        return n
    differs = (a[:n] != b[:n]).nonzero()
    return int(differs[0]) if differs.numel() else n


class CachedModel:
    """A model and the token ids whose keys and values sit in its cache."""

    def __init__(self, model, layers: Sequence[int] | None = None, execution: Execution | None = None,
                 role: str = "model") -> None:
        self.model = model
        self.layers = tuple(layers) if layers is not None else None
        self._subset = layer_subset(model, self.layers) if self.layers is not None else None
        self.device = next(model.parameters()).device
        self.feature_layers: tuple[int, ...] = ()
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self.execution = execution or Execution()
        self._plan = forward_plan(model, self.execution, role)
        # Chains on the dynamic cache, where the probe found the lean forward exact on this transformers.
        self._lean = lean_forward(model) if self.execution.lean and self._plan.lean else None
        problem = static_problem(model) if self.execution.cache == "static" else None
        if problem is not None:
            self.execution.note(f"{problem}: the {role} keeps the dynamic cache")
        least = compiled_capacity(model) if self.execution.compiles else MIN_CAPACITY  # one capacity compiled
        self._static = StaticKV(model, least) if self.execution.cache == "static" and problem is None else None
        self._compiled_step = None  # the compiled forward, made at its first use
        self.last_fed = 0  # tokens fed by the last `extend`
        self.reset()

    @property
    def static(self) -> bool:
        """The cache is static: a rollback moves its write position."""
        return self._static is not None

    @property
    def compiled(self) -> bool:
        """The short forwards run compiled (until a compile fails)."""
        return self._static is not None and self.execution.compiles

    @property
    def cache(self):
        return self._dynamic if self._static is None else self._static.cache

    def reset(self) -> None:
        self._dynamic = self._new_dynamic_cache() if self._static is None else None
        if self._static is not None:
            self._static.seek(0)
        self.ids = torch.empty(0, dtype=torch.long)  # (L,) on CPU
        self.features: list[torch.Tensor] = []  # per feature layer: (L, H) hidden states aligned with the cache
        self._tail = TreeRows()

    def _new_dynamic_cache(self) -> DynamicCache:
        return growing_cache() if self.execution.growing and self._plan.growing else DynamicCache()

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

    def holds(self, ids: torch.Tensor) -> bool:
        """Whether the cache holds exactly `ids` (N,)."""
        return self.length == ids.numel() and torch.equal(self.ids, ids)

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens."""
        self.drop_tail()
        if length >= self.length:
            return
        if self._static is not None:  # the entries past `length` are overwritten by the next forward
            self.ids = self.ids[:length]
            self.features = [f[:length] for f in self.features]
            self._static.seek(length)
            return
        if length == 0 or not hf_compat.croppable(self.cache):
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

        With `last`, only the logits of the last `last` fed tokens come back, (min(last, T), V): models that take
        `logits_to_keep` skip the head for the other rows.
        """
        self.drop_tail()
        start = self.length
        self.last_fed = new_ids.numel()
        positions = torch.arange(start, start + new_ids.numel(), device=self.device)
        hidden = output_hidden_states or bool(self.feature_layers)
        logits, states = self._forward(new_ids, positions, None, hidden, last, slot=start)
        if last is not None:
            logits = logits[-last:]
        self.ids = torch.cat([self.ids, new_ids.cpu()])
        if self.feature_layers:
            fresh = [states[i] for i in self.feature_layers]  # each (T, H)
            self.features = [torch.cat([old, new]) for old, new in zip(self.features, fresh, strict=True)] \
                if self.features else fresh
        if output_hidden_states:
            return logits, states
        return logits

    def _forward(self, tokens: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor | None, hidden: bool,
                 last: int | None, slot: int) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Feed `tokens` (T,) at `positions` (T,) into cache entries `slot` .. `slot + T - 1`, after the sequence
        and the tail: logits (T or `last`, V) float32 and hidden states (each (T, H)) when `hidden`. `visible`
        (T, slot + T) says which entries each row sees (None: a chain, each row sees the sequence up to itself)."""
        tokens, positions = to_device(tokens, self.device), to_device(positions, self.device)
        if self._static is not None:
            return self._static_forward(tokens, positions, visible, hidden, last, slot)
        rows = tokens.numel()
        keep = last if last is not None and last < rows else 0
        if self._lean is not None and visible is None:
            with torch.inference_mode(), only_layers(self.model, self._subset):
                logits, states = self._lean(tokens[None], positions[None], self.cache, keep, hidden)
            return logits[0].float(), tuple(h[0] for h in states)
        mask = {}
        if visible is not None:
            dtype = self.model.dtype
            additive = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)
            mask = {"attention_mask": to_device(additive, self.device)[None, None]}  # (1, 1, T, S)
        head = {"logits_to_keep": keep} if keep and self._keeps_logits else {}
        with torch.inference_mode(), only_layers(self.model, self._subset):
            out = self.model(input_ids=tokens[None], position_ids=positions[None], use_cache=True,
                             output_hidden_states=hidden, **self._plan.cache_arguments(self.cache), **mask, **head)
        return out.logits[0].float(), tuple(h[0] for h in out.hidden_states) if hidden else ()

    def _static_forward(self, tokens: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor | None,
                        hidden: bool, last: int | None, start: int) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """`_forward` on the static cache: written from the write position `start` on, compiled when it may be."""
        static = self._static
        assert static is not None, "called on the static path only"
        rows = tokens.numel()
        prefill = last is not None and rows > last + 1  # most rows are fed for the cache alone: a prompt
        # The first forward on a cache runs eagerly too: it allocates the buffers (marked as fixed addresses for
        # CUDA graphs, which a compiled allocation cannot do), and a step compiled before that would be
        # compiled again after it.
        compiled = self.compiled and static.allocated and rows <= COMPILED_ROWS and not prefill
        fed = padded_rows(rows) if compiled else rows
        static.reserve(start + fed, kept=start)
        if fed > rows:  # padding rows repeat the last position and write past the rows that count
            tokens = torch.cat([tokens, tokens.new_zeros(fed - rows)])  # where they are: no read
            positions = torch.cat([positions, positions[-1:].expand(fed - rows)])
            if visible is not None:
                visible = torch.cat([visible, visible[-1:].expand(fed - rows, -1)])
        mask = static.chain_mask(positions) if visible is None else static.tree_mask(visible)
        # A compiled model's forwards always return the hidden states, so that one graph per row bucket serves the
        # drafters that read the target's features (EAGLE, DFlash, MTP) too: a `hidden` flag would make a second
        # graph per bucket, compiled at its first use in a generation. Its eager forwards (the first one on a
        # cache, prefills) ask for them too: they install transformers' capturing hooks, which a compiled forward
        # cannot install without a graph break (their lock) and a change of state that compiles again.
        inputs = (tokens[None], positions[None], mask, hidden or self.compiled)
        keep = last if last is not None and self._keeps_logits and last < rows else 0
        out = None
        with torch.inference_mode(), only_layers(self.model, self._subset):
            static.seek(start)
            if compiled:
                out = self._run_compiled(inputs)
                if out is None:  # the compile failed: the cache is written again eagerly
                    static.seek(start)
            if out is None:
                out = self._step(*inputs, keep=keep)
        logits = out.logits[0, :rows]  # `extend` keeps the last rows asked for
        states = tuple(h[0, :rows] for h in out.hidden_states) if hidden else ()
        if compiled and self.device.type == "cuda":  # a captured graph's outputs are overwritten by its next replay
            logits, states = logits.clone(), tuple(h.clone() for h in states)
        return logits.float(), states

    def _step(self, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor, hidden: bool,
              keep: int = 0):
        """One forward on the static cache (the logits of the last `keep` rows only, 0: all): what is compiled."""
        head = {"logits_to_keep": keep} if keep else {}
        return self.model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask, use_cache=True,
                          output_hidden_states=hidden, **self._plan.cache_arguments(self.cache), **head)

    def _run_compiled(self, inputs: tuple):
        """The compiled forward's output, or None when compiling or capturing failed (then never tried again)."""
        try:
            step = self._compiled_step
            if step is None:
                own = self.execution.step_code(self.model, self.layers, CachedModel._step)
                step = self._compiled_step = compile_step(MethodType(own, self), self.device)
            if self.device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()
            assert self._static is not None, "compiled forwards run on the static cache"
            call = warm_call(self.model, self.layers, inputs, self._static.capacity)
            mark_rows_dynamic(inputs)
            return run_warm(step, self.execution, call, inputs)
        except Exception as exc:  # any compile or capture failure falls back to eager forwards
            if is_out_of_memory(exc):
                raise
            self.execution.give_up_compiling(exc)
            return None

    def warm_up(self, rows: int, runs: int = 1) -> None:
        """Compile the forward of `rows` fed rows now, as a generation meets it: through `extend`, padded to its
        bucket, at the cache's capacity, after a first forward has allocated the cache; fed `runs` times (CUDA
        graphs are captured at a later call than the compile). The tokens are a scratch sequence: the cache is
        empty afterwards. A compile that fails gives compiling up for every cache of these models, with a notice
        (`Execution.give_up_compiling`); the forward then runs eagerly, as in a generation."""
        if not self.compiled:
            return
        scratch = torch.zeros(rows, dtype=torch.long)
        try:
            if self._static is not None and not self._static.allocated:
                self.extend(scratch[:1])  # eager: allocates the buffers
                self.reset()
            for _ in range(runs):
                self.extend(scratch)
                self.reset()
                if not self.compiled:
                    break
        finally:
            self.reset()

    def advance_to(self, ids: torch.Tensor, output_hidden_states: bool = False, last: int | None = None):
        """Make the cache hold `ids` (N,); logits of the tokens that had to be fed (of at most `last` of them).

        At least the last token is always fed, so the last row scores what follows `ids`.
        """
        keep = min(common_prefix_length(self.ids, ids), ids.numel() - 1)
        self.crop(keep)
        return self.extend(ids[keep:], output_hidden_states=output_hidden_states, last=last)

    def prefill(self, ids: torch.Tensor) -> int:
        """Make the cache hold `ids` (N,) but the last token, for what needs the cache before a pass (timed
        forwards, a drafter's features, a tree); how many tokens were fed. A chain pass needs none: its forward
        reads whatever the cache lacks, the prompt in a cold request's first pass."""
        if ids.numel() < 2 or self.holds(ids[:-1]):
            return 0
        self.advance_to(ids[:-1], last=1)  # only the cache is wanted
        return self.last_fed

    # ---- token trees ------------------------------------------------------------------------

    def extend_tree(self, tokens: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        """Feed tail rows `tokens` (T,); `parents` (T,) index earlier tail rows (-1: the row hangs off the
        sequence). Logits (T, V) float32; each row sees the sequence, its tail ancestors and itself."""
        self._require_tree_support()
        tail = self._tail
        tail.add(tokens.cpu(), parents.cpu())
        new = slice(len(tail) - tokens.numel(), len(tail))
        positions = self.length + tail.depths[new]  # (T,)
        visible = torch.cat([torch.ones(tokens.numel(), self.length, dtype=torch.bool),
                             tail.sees[new]], dim=1)  # (T, L + tail)
        logits, states = self._forward(tokens, positions, visible, bool(self.feature_layers), None,
                                       slot=new.start + self.length)
        if self.feature_layers:
            fresh = [states[i] for i in self.feature_layers]  # each (T, H)
            tail.features = [torch.cat([old, f]) for old, f in zip(tail.features, fresh, strict=True)] \
                if tail.features else fresh
        return logits

    def keep_path(self, rows: list[int]) -> None:
        """Keep tail rows `rows` (a root-to-node path, in order) as the next tokens of the sequence; drop the rest.

        The kept rows' keys and values (and features) are moved in place next to the sequence: they were
        computed at exactly the positions the path's tokens now occupy, seeing exactly their prefix.
        """
        tail = self._tail
        length = self.length
        if rows != list(range(len(rows))):  # a path of the first rows already sits where it belongs
            keep = torch.tensor([length + r for r in rows], device=self.device)
            layers = self.cache.layers if self._static is None else self._static.layers()
            with torch.inference_mode():
                for layer in layers:
                    assert isinstance(layer, DynamicLayer | StaticLayer), \
                        "tree_problem() admits full-attention layers only"
                    for states in (layer.keys, layer.values):  # each (B, heads, L + tail or capacity, d)
                        assert states is not None
                        states[..., length: length + len(rows), :] = states.index_select(-2, keep)
        if tail.features:
            kept = torch.tensor(rows, dtype=torch.long, device=tail.features[0].device)
            self.features = [torch.cat([f, t.index_select(0, kept)]) for f, t in
                             zip(self.features, tail.features, strict=True)] if self.features else \
                [t.index_select(0, kept) for t in tail.features]
        path_ids = tail.tokens[torch.tensor(rows, dtype=torch.long)] if rows else tail.tokens[:0]
        if self._static is not None:
            self._static.seek(length + len(rows))
        elif len(tail) > len(rows):
            self.cache.crop(len(rows) - len(tail))
        self.ids = torch.cat([self.ids, path_ids])
        self._tail = TreeRows()

    def drop_tail(self) -> None:
        """Forget the tail rows: the cache holds the sequence alone again."""
        if len(self._tail):
            if self._static is not None:
                self._static.seek(self.length)
            else:
                self.cache.crop(-len(self._tail))
            self._tail = TreeRows()

    def tree_problem(self) -> str | None:
        """Why this model cannot verify a token tree in one forward, or None when it can."""
        implementation = hf_compat.attention_implementation(self.model)
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
