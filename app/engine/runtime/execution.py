"""How the models run: the kind of KV cache, and whether the short forwards are compiled.

A load-time choice (`load_models(cache=..., compile=...)`, `--cache`, `--compile`, the model dialog), held by
the loaded models and used by every cache that runs one of them: the target's and those of the drafters that
run a model (draft model, layer skip).

- **dynamic** cache: keys and values grow as tokens are fed (written into buffers whose capacity doubles,
  growing_cache.py) and a rollback crops them. The default on the CPU and MPS: on the CPU it measured fastest
  (BENCHMARKS.md, "Static cache and compilation"); CUDA runs the fast path by default (`DEFAULTS` below).
- **static** cache: buffers preallocated at a capacity of a few power-of-two sizes (grown, by copying, when a
  sequence outgrows them), written at a write position. A rollback moves the position back; the rejected
  entries are overwritten by the next pass (docs/ALGORITHMS.md §2). Every forward then has fixed shapes.
- **compiled**: the short forwards (one-token steps, verification blocks, tree rounds), their rows padded to a power
  of two, run through `torch.compile`: with CUDA graphs (mode "reduce-overhead", one graph captured per power of
  two) on CUDA, Inductor's default mode elsewhere. Dynamo traces each model twice: the one-token step, and one graph
  for every longer forward with the row count a symbol (`mark_rows_dynamic`). A prefill (a prompt, a drafter
  catching up on it) stays eager. Compiling needs the static cache, which then holds the model's context from the
  start (COMPILED_CAPACITY slots at most, static_cache.py), so the shapes are the row buckets alone; they are
  compiled while the models load (`warm_up` and `warm_up_plan` in app/engine/loading/warm_up.py), with progress, not
  at the first generation. A compile or capture that fails falls back to eager forwards with a notice, never an
  error. Each model and layer subset compiles its own copy of the step (`Execution.step_code`), and a call equal to
  one that already ran skips dynamo's guard evaluation (`run_warm`).

This module imports no torch at load: the command line checks the choice before anything loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import FunctionType
from typing import TYPE_CHECKING

from app.engine.settings import SettingsError

if TYPE_CHECKING:
    import torch

CACHE_MODES = ("dynamic", "static")
FAST_PATH = ("static", True)  # gpt-fast's: a static cache, the short forwards compiled (CUDA graphs on CUDA)
EAGER_DEFAULT = ("dynamic", False)
# device type -> (cache, compile) when none is asked for; any other device gets EAGER_DEFAULT. CUDA runs the fast
# path: on an H200 it decoded 5x faster than `generate` and 3-4.6x faster than HF's assisted generation, where
# eager forwards are slower than `generate` (BENCHMARKS.md, "Device check"). Eager forwards on the dynamic cache
# stay one choice away (`--cache dynamic --no-compile`, the model dialog). On the CPU they measured fastest once
# the compile is counted (BENCHMARKS.md, "Static cache and compilation"); MPS is unmeasured.
DEFAULTS: dict[str, tuple[str, bool]] = {"cuda": FAST_PATH}
DEVICE_NAMES = {"cuda": "CUDA", "mps": "MPS", "cpu": "CPU"}
RECOMPILE_LIMIT = 64  # compiled shapes per step function: row buckets x capacities x models (target, drafters)
COMPILED_ROWS = 128  # forwards of more rows run eagerly, as do prefills (rows fed for the cache alone)


@dataclass
class Execution:
    """The mode the models run in, and what the caches have had to say about it since the last generation."""

    cache: str = "dynamic"
    compile: bool = False
    # Chain forwards on the dynamic cache skip the wrappers of the model's forward where it allows (the same
    # numbers: lean_forward.py); off only to measure what that saves (tools/measure/execution.py).
    lean: bool = True
    # The dynamic cache writes each forward's keys and values into buffers grown by doubling instead of
    # concatenating the whole cache (the same numbers: growing_cache.py); off only to measure what that saves.
    growing: bool = True
    compile_failure: str | None = field(default=None, compare=False)  # why compiling was given up
    # The calls of compiled steps that have run (`warm_call`): one of them again needs no guard evaluation.
    warm_calls: set[tuple] = field(default_factory=set, compare=False, repr=False)
    _step_codes: dict[tuple, FunctionType] = field(default_factory=dict, compare=False, repr=False)
    notices: list[str] = field(default_factory=list, compare=False, repr=False)  # for the next generation
    _said: set[str] = field(default_factory=set, compare=False, repr=False)

    @property
    def compiles(self) -> bool:
        """Compile the short forwards: asked for, and no compile has failed yet."""
        return self.compile and self.compile_failure is None

    @property
    def label(self) -> str:
        """'dynamic cache', 'static cache', 'static cache, compiled': the status bar's words."""
        return mode_label(self.cache, self.compiles)

    def note(self, message: str) -> None:
        """Say `message` (once) in the next generation's notices."""
        if message not in self._said:
            self._said.add(message)
            self.notices.append(message)

    def step_code(self, model, layers: tuple[int, ...] | None, step: Callable) -> FunctionType:
        """`step` with a code object of its own for `model` run with `layers`, shared by every cache of them.

        Dynamo keeps a code object's compiled graphs in one list, told apart by guards: one list per model and
        layer subset holds graphs that differ in shapes alone, which is what lets `run_warm` skip the guards (the
        few it still evaluates then tell shapes apart, never one model from another)."""
        key = (id(model), layers)
        if key not in self._step_codes:
            assert isinstance(step, FunctionType), "a plain function: its code is copied"
            code = step.__code__.replace(co_name=f"{step.__name__}_{len(self._step_codes)}")
            self._step_codes[key] = FunctionType(code, step.__globals__, code.co_name, step.__defaults__,
                                                 step.__closure__)
        return self._step_codes[key]

    def give_up_compiling(self, exc: BaseException) -> None:
        """A compile or capture failed: every cache of these models runs eagerly from now on."""
        if self.compile_failure is None:
            first = (str(exc).strip().splitlines() or ["no details"])[0][:200]
            self.compile_failure = f"{type(exc).__name__}: {first}"
            self.note(f"compiling the forwards failed ({self.compile_failure}); they run eagerly instead")


def mode_label(cache: str, compiled: bool) -> str:
    return f"{cache} cache" + (", compiled" if compiled else "")


def default_words(choice: int) -> str:
    """The devices' defaults in words, for the help and the model dialog: choice 0 the cache ("dynamic on every
    device", "CUDA: static, elsewhere: dynamic"), 1 compiling ("off on every device")."""
    def word(value) -> str:
        return value if isinstance(value, str) else ("on" if value else "off")

    eager = word(EAGER_DEFAULT[choice])
    special = [f"{DEVICE_NAMES.get(device, device)}: {word(chosen[choice])}" for device, chosen in DEFAULTS.items()
               if chosen[choice] != EAGER_DEFAULT[choice]]
    return ", ".join([*special, f"elsewhere: {eager}"]) if special else f"{eager} on every device"


def check_execution(cache: str | None, compile: bool | None) -> None:
    """Refuse a choice that cannot run anywhere (SettingsError says what is allowed)."""
    if cache is not None and cache not in CACHE_MODES:
        raise SettingsError(f"unknown cache {cache!r}: use {' or '.join(CACHE_MODES)}")
    if compile and cache == "dynamic":
        raise SettingsError("compiling needs the static cache (fixed shapes): use --cache static with --compile, "
                            "or leave --cache out")


def resolve_execution(cache: str | None, compile: bool | None, device: torch.device) -> Execution:
    """The mode for `device`: what was asked for, the device's default for what was not."""
    check_execution(cache, compile)
    default_cache, default_compile = DEFAULTS.get(device.type, EAGER_DEFAULT)
    if compile is None:
        compile = default_compile and cache in (None, "static")
    if cache is None:
        cache = "static" if compile else default_cache
    return Execution(cache=cache, compile=bool(compile))


def settle_execution(execution: Execution, target) -> None:
    """Fall back to eager forwards on the dynamic cache, with a notice, where the target cannot take the static
    one (its drafters are checked by their own caches when built)."""
    if execution.cache != "static":
        return
    from app.engine.runtime.static_cache import static_problem

    spread = len(set(getattr(target, "hf_device_map", {}).values())) > 1
    problem = "the static cache keeps a model on one device, and this one is spread over several" if spread \
        else static_problem(target)
    if problem is not None:
        execution.note(f"{problem}: the models run eagerly on the dynamic cache")
        execution.cache, execution.compile = "dynamic", False


def compile_step(step, device: torch.device):
    """`step` compiled for fixed shapes: CUDA graphs on CUDA, Inductor's default mode elsewhere."""
    import torch
    import torch._dynamo.config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit"):  # the name changed across torch versions
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), RECOMPILE_LIMIT))
    mode = "reduce-overhead" if device.type == "cuda" else None
    return torch.compile(step, mode=mode, dynamic=None)


def mark_rows_dynamic(inputs: tuple) -> None:
    """Compile every bucket of two rows or more as one graph whose row count is a symbol (vLLM's way): dynamo
    traces the model once for them instead of once per bucket, which is most of a compiling load and all of a
    second launch's (Inductor's output is kept, dynamo's tracing is not). CUDA graphs are still captured per
    bucket; the one-token step keeps a graph of its own, fully specialised (dynamo specialises sizes 0 and 1)."""
    from torch._dynamo import mark_dynamic  # documented in torch.compiler's dynamic-shapes guide

    input_ids, position_ids, mask, _ = inputs
    if input_ids.shape[1] < 2:
        return
    for tensor, dim in ((input_ids, 1), (position_ids, 1), (mask, 2)):
        mark_dynamic(tensor, dim, min=2, max=COMPILED_ROWS)


def warm_call(model, layers: tuple[int, ...] | None, inputs: tuple, capacity: int) -> tuple:
    """What picks a compiled step's graph, in a few integers: the model and its layer subset, the shapes, dtypes
    and device of the inputs (ids (1, T), positions (1, T), mask (1, 1, T, capacity), the hidden-states flag) and
    the cache's capacity. Equal for two calls, they run the same graph."""
    input_ids, position_ids, mask, hidden = inputs
    return (id(model), layers, tuple(input_ids.shape), tuple(position_ids.shape), tuple(mask.shape), mask.dtype,
            mask.device, bool(hidden), capacity)


def run_warm(step, execution: Execution, call: tuple, inputs: tuple):
    """`step(*inputs)`, without dynamo's guard evaluation when `call` (`warm_call`) has run before.

    Dynamo checks its guards (shapes, dtypes, the model's attributes ...) at every call of a compiled step: on a
    GPU about 0.8 ms a token, more than half the forward of a small model. A call equal to one that already ran
    has a graph, so `skip_guard_eval_unsafe` then evaluates only the guards that tell the compiled graphs apart;
    any other call evaluates them all (and compiles if it must), and is remembered. Should dynamo still want to
    compile a warm call (a state `warm_call` does not hold changed), that call runs again with every guard."""
    import torch

    if call in execution.warm_calls:
        try:
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return step(*inputs)
        except RuntimeError as exc:  # dynamo would compile: some state `call` does not hold changed
            if "skip_guard_eval_unsafe" not in str(exc):
                raise
            # Then it runs again with every guard: the same rows at the same slots, so whatever part of it ran
            # wrote what it writes again.
    out = step(*inputs)
    execution.warm_calls.add(call)
    return out


def compiles_graph(bucket: int, buckets: list[int]) -> bool:
    """Whether the first forward of `bucket` rows compiles a graph, of a model whose forwards meet `buckets`:
    the one-token step and the first bucket of two rows or more do; the others share that one's graph
    (`mark_rows_dynamic`) and only run it (and, on CUDA, capture it)."""
    return bucket == 1 or bucket == min((b for b in buckets if b > 1), default=None)


def padded_rows(rows: int) -> int:
    """The compiled shape `rows` fed rows are padded to: the next power of two."""
    return 1 << max(0, rows - 1).bit_length()


def row_buckets(most: int) -> list[int]:
    """The compiled shapes of forwards of 1 to `most` rows: their padded sizes, COMPILED_ROWS at most."""
    return sorted({padded_rows(rows) for rows in range(1, min(most, COMPILED_ROWS) + 1)})


def fewest_rows(bucket: int) -> int:
    """The fewest fed rows that are padded to `bucket` (what a warm-up feeds: the padding makes up the rest)."""
    return 1 if bucket == 1 else bucket // 2 + 1
