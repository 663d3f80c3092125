"""The compile plan: when the short forwards are compiled (runtime/execution.py), loading ends by compiling every
shape a generation will meet, step by step with progress, so that the first generation does not wait minutes."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.engine.errors import is_out_of_memory, release_memory
from app.engine.loading.models import LoadedModels
from app.engine.runtime.cached_model import CachedModel
from app.engine.runtime.compile_cache import keep_compiled
from app.engine.runtime.devices import synchronize
from app.engine.runtime.execution import compiles_graph, fewest_rows, row_buckets

if TYPE_CHECKING:
    from app.engine.hf_compat import CausalLM

# The share of a compiling load's progress bar that loading the weights takes; compiling takes the rest.
LOADING_SHARE = 0.2


@dataclass
class WarmUpModel:
    """One model whose short forwards loading compiles: who it is (in the progress messages), its weights and
    layer subset, and the row buckets a generation feeds it (execution.py `row_buckets`)."""

    who: str
    model: CausalLM
    layers: tuple[int, ...] | None
    buckets: list[int]
    role: str = "target"  # as the decoder names its cache (CachedModel's notices), or "<drafter> drafter"

    @property
    def drafter(self) -> bool:
        """A drafter's forwards: one-token steps, a catch-up, tree rounds; else the target's verification."""
        return self.role != "target"

    def step(self, bucket: int) -> str:
        """What compiling `bucket` rows is for: 'one-token step', 'verify 8 rows', 'tree round 4 rows'."""
        if bucket == 1:
            return "one-token step"
        if not self.drafter:
            return f"verify {bucket} rows"
        return "catch-up 2 rows" if bucket == 2 else f"tree round {bucket} rows"


def warm_up_plan(models: LoadedModels) -> list[WarmUpModel]:
    """The shapes a generation meets, per model that runs compiled: the target's one-token step and its
    verification blocks up to the largest K and tree the settings allow (MAX_K + 1 rows, MAX_TREE_NODES + 1;
    chains and trees share the buckets), and, for the draft model and the layer-skip drafter at its default
    exit, the one-token step, the catch-up of an accepted draft (2 rows) and the tree rounds (tree_growth's
    MAX_WIDTH rows at most). Forwards of more than COMPILED_ROWS rows, and prefills, run eagerly. A compiled
    forward always returns the hidden states, so the drafters that read the target's features meet no other
    shape; the forwards of another layer-skip exit compile at their first use."""
    from app.engine.drafters.registry import layer_skip_layers
    from app.engine.drafters.tree_growth import MAX_WIDTH
    from app.engine.settings import MAX_K, MAX_TREE_NODES, DrafterOptions

    context = models.context_length  # rows beyond it are never fed
    target_rows = min(max(MAX_K + 2, MAX_TREE_NODES + 1), context)  # K drafts, the last committed token, a bonus
    drafter_rows = min(max(2, MAX_WIDTH), context)
    plan = [WarmUpModel("target", models.target, None, row_buckets(target_rows))]
    if models.draft is not None:
        plan.append(WarmUpModel("draft model", models.draft, None, row_buckets(drafter_rows), "draft-model drafter"))
    if "layer-skip" in models.available_drafters:
        layers = layer_skip_layers(models, DrafterOptions())
        plan.append(WarmUpModel(f"layer skip ({len(layers)} layers)", models.target, layers,
                                row_buckets(drafter_rows), "layer-skip drafter"))
    return plan


@dataclass
class StepClock:
    """The warm-up steps of one kind (those that compile a graph, or those that run a graph already compiled):
    how many there are, and how many have ended in how many seconds."""

    total: int
    done: int = 0
    seconds: float = 0.0

    def left(self) -> float | None:
        """Seconds the steps to go will take at the mean of those done; None before the first has ended."""
        if self.done == self.total:
            return 0.0
        return None if self.done == 0 else self.seconds / self.done * (self.total - self.done)


def time_left(compiling: StepClock, running: StepClock) -> str:
    """', about 40 s left' / ', about 3 min left': each kind's steps to go at the mean time of its steps done
    (compiles of one model take about as long as each other; a step that runs a compiled graph takes a fraction
    of one), a kind with none done yet counted as free; '' before the first compile has ended."""
    compile_s = compiling.left()
    if compile_s is None:
        return ""
    seconds = compile_s + (running.left() or 0.0)
    if seconds < 60:
        return f", about {max(5, 5 * round(seconds / 5))} s left"
    return f", about {round(seconds / 60)} min left"


def warm_up(models: LoadedModels, progress=None) -> None:
    """Compile now what `warm_up_plan` says, one shape at a time, through the step a generation runs
    (`CachedModel.warm_up`) on scratch caches; `progress(fraction, message)` before each step ('compiling
    target: verify 8 rows (3/14), about 2 min left': the time left from the steps done). A progress callback
    that raises abandons the load between two steps. A compile that fails, or any other failure of a step, does
    not fail the load: the models run eagerly from then on, with a notice at the next generation
    (`Execution.give_up_compiling`). What Inductor compiles is kept in the user cache folder
    (runtime/compile_cache.py), so the next launch of the same models compiles far less."""
    report = progress or (lambda fraction, message: None)
    execution = models.execution
    if not execution.compiles:
        return
    keep_compiled(tuple(name for name in (models.target_name, models.draft_name) if name), models.dtype,
                  models.device)  # a second launch finds these forwards compiled
    caches = [(entry, CachedModel(entry.model, entry.layers, execution=execution, role=entry.role))
              for entry in warm_up_plan(models)]
    caches = [(entry, cached) for entry, cached in caches if cached.compiled]  # a model on the dynamic cache: eager
    total = max(1, sum(len(entry.buckets) for entry, _ in caches))
    clocks = {kind: StepClock(sum(compiles_graph(bucket, entry.buckets) is kind for entry, _ in caches
                                  for bucket in entry.buckets)) for kind in (True, False)}
    # CUDA graphs: a first run, the capture, a replay, so that a capture that fails does so now. The decoder's
    # own caches sit at other addresses: their first forwards capture again (a forward's time, no compile).
    runs = 3 if models.device.type == "cuda" else 1
    done = 0
    for entry, cached in caches:
        for bucket in entry.buckets:
            left = time_left(clocks[True], clocks[False])
            report(done / total, f"compiling {entry.who}: {entry.step(bucket)} ({done + 1}/{total}){left}")
            clock, started = clocks[compiles_graph(bucket, entry.buckets)], time.perf_counter()
            try:
                cached.warm_up(fewest_rows(bucket), runs)
            except Exception as exc:  # noqa: BLE001 - whatever fails here, the models can still run eagerly
                if is_out_of_memory(exc):
                    release_memory(exc)
                execution.give_up_compiling(exc)
            if not execution.compiles:
                report(1.0, "compiling failed: the models run eagerly")
                return
            done += 1
            clock.done, clock.seconds = clock.done + 1, clock.seconds + time.perf_counter() - started
    synchronize(models.device)
