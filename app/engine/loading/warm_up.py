"""The compile plan: when the short forwards are compiled (runtime/execution.py), loading ends by compiling every
shape a generation will meet, step by step with progress, so that the first generation does not wait minutes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.engine.errors import is_out_of_memory, release_memory
from app.engine.loading.models import LoadedModels
from app.engine.runtime.cached_model import CachedModel
from app.engine.runtime.devices import synchronize
from app.engine.runtime.execution import fewest_rows, row_buckets

if TYPE_CHECKING:
    from transformers.models.auto.modeling_auto import _BaseModelWithGenerate as CausalLM

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
    MAX_WIDTH rows at most). Forwards of more than COMPILED_ROWS rows, and prefills, run eagerly. The forwards
    of a learned drafter's target features (hidden states) and of another layer-skip exit compile at their
    first use."""
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


def warm_up(models: LoadedModels, progress=None) -> None:
    """Compile now what `warm_up_plan` says, one shape at a time, through the step a generation runs
    (`CachedModel.warm_up`) on scratch caches; `progress(fraction, message)` before each step ('compiling
    target: verify 8 rows (3/14)'). A progress callback that raises abandons the load between two steps. A
    compile that fails, or any other failure of a step, does not fail the load: the models run eagerly from then
    on, with a notice at the next generation (`Execution.give_up_compiling`)."""
    report = progress or (lambda fraction, message: None)
    execution = models.execution
    if not execution.compiles:
        return
    caches = [(entry, CachedModel(entry.model, entry.layers, execution=execution, role=entry.role))
              for entry in warm_up_plan(models)]
    caches = [(entry, cached) for entry, cached in caches if cached.compiled]  # a model on the dynamic cache: eager
    total = max(1, sum(len(entry.buckets) for entry, _ in caches))
    # CUDA graphs: a first run, the capture, a replay, so that a capture that fails does so now. The decoder's
    # own caches sit at other addresses: their first forwards capture again (a forward's time, no compile).
    runs = 3 if models.device.type == "cuda" else 1
    done = 0
    for entry, cached in caches:
        for bucket in entry.buckets:
            report(done / total, f"compiling {entry.who}: {entry.step(bucket)} ({done + 1}/{total})")
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
    synchronize(models.device)
