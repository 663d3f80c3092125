"""Run configurations: the demo families (v1, v2, v3, the GPU recipe) and the ``--quick`` smoke test.

Every number that influences the trained weights lives here, so the cache
fingerprint (see ``RunConfig.fingerprint``) changes whenever one of them does
and stale checkpoints are never resumed into a different run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

DEFAULT_SEED = 1234
END_OF_TEXT = "<|endoftext|>"


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """Size of one LlamaForCausalLM."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int


@dataclasses.dataclass(frozen=True)
class StageSchedule:
    """Optimisation settings of one training stage."""

    steps: int
    batch_size: int
    peak_lr: float
    warmup_steps: int
    weight_decay: float = 0.1
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0


@dataclasses.dataclass(frozen=True)
class Unlikelihood:
    """Sequence-level unlikelihood on the target's greedy continuations (objectives.py)."""

    weight: float
    ngram: int = 4
    prompt_tokens: int = 32  # taken from the start of each training block
    new_tokens: int = 64


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything that determines the output of one build."""

    name: str
    seed: int
    vocab_size: int
    block_size: int
    target: ModelShape
    draft: ModelShape
    target_schedule: StageSchedule
    draft_schedule: StageSchedule
    # Early-exit (LayerSkip-style) loss: total weight shared by exits 1..L-1,
    # rising linearly with depth so deep exits (the useful drafters) get most.
    early_exit_total_weight: float = 0.6
    # Exit losses are computed on every n-th position only: the extra LM-head
    # passes would otherwise almost halve training throughput on CPU.
    early_exit_position_stride: int = 4
    distill_temperature: float = 1.5
    distill_kl_weight: float = 0.8
    # Corpus slice (None = everything) and evaluation size.
    max_train_code_files: int | None = None
    max_train_prose_docs: int | None = None
    prose_repeats: int = 2
    # "pydoc": the language-reference topics (always present); "docs": the
    # installed Python documentation (see corpus.py and python_docs.py).
    prose_source: str = "pydoc"
    eval_blocks_per_domain: int = 64
    sample_new_tokens: int = 80
    # A run whose finished target this run's target starts from (a second schedule on the same shape, data and
    # tokenizer); "" trains from scratch.
    target_init: str = ""
    # Blocks of the target's own continuations of corpus prefixes (generation.py), and their share of the
    # draft's distillation batches; 0: the draft distils on the corpus alone.
    draft_generated_blocks: int = 0
    draft_generated_share: float = 0.0
    # An unlikelihood term in the target's loss (None: none).
    unlikelihood: Unlikelihood | None = None
    # The repetition penalty the family suggests to the window and `run` (playground.json). The target's own
    # text in the draft's data is written under it too: the draft is scored on text decoded that way.
    suggested_repetition_penalty: float = 1.0

    def fingerprint(self, exclude: frozenset[str] = frozenset()) -> str:
        """Short hash of the configuration (minus ``exclude``d fields)."""
        return short_key({k: v for k, v in dataclasses.asdict(self).items() if k not in exclude}, ADDED_LATER)

    def target_fingerprint(self) -> str:
        """Keys the run folder: everything the tokenizer and target depend on.

        Draft and evaluation settings are left out so that retuning the
        distillation reuses an already trained target.
        """
        return self.fingerprint(DRAFT_FIELDS | EVALUATION_FIELDS)

    def draft_fingerprint(self) -> str:
        return self.fingerprint(EVALUATION_FIELDS)


# Fields added after runs were built, with the values those runs had.
def short_key(fields: dict, added_later: dict) -> str:
    """Short hash of `fields`, leaving out the fields added later that hold their defaults: configurations that
    leave them there keep the keys they were trained under."""
    kept = {k: v for k, v in fields.items() if not (k in added_later and v == added_later[k])}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:10]


ADDED_LATER = {"target_init": "", "draft_generated_blocks": 0, "draft_generated_share": 0.0, "unlikelihood": None,
               "suggested_repetition_penalty": 1.0}
DRAFT_FIELDS = frozenset({"draft", "draft_schedule", "distill_temperature", "distill_kl_weight",
                          "draft_generated_blocks", "draft_generated_share", "suggested_repetition_penalty"})
EVALUATION_FIELDS = frozenset({"eval_blocks_per_domain", "sample_new_tokens"})


def full_config(seed: int = DEFAULT_SEED) -> RunConfig:
    """Demo family v1 (the committed models): sized for ~45 minutes on 2 CPU cores.

    (On a machine shared with other jobs the build took ~56 minutes.)

    The budget buys only a few million training tokens. A first attempt with
    hidden 192 (3.4M parameters, 500 steps) stayed near bigram level and
    completed code with endless newlines, so the target is narrow and gets
    many more optimiser steps instead: a well trained small model beats an
    undertrained big one.
    """
    return RunConfig(
        name="full",
        seed=seed,
        vocab_size=4096,
        block_size=512,
        target=ModelShape(hidden_size=128, num_layers=6, num_heads=4, intermediate_size=384),
        draft=ModelShape(hidden_size=96, num_layers=2, num_heads=3, intermediate_size=256),
        target_schedule=StageSchedule(steps=1400, batch_size=4, peak_lr=3e-3, warmup_steps=50),
        draft_schedule=StageSchedule(steps=800, batch_size=4, peak_lr=3e-3, warmup_steps=40),
        early_exit_total_weight=0.5,
    )


def quick_config(seed: int = DEFAULT_SEED) -> RunConfig:
    """A tiny end-to-end run (about a minute) for the test suite."""
    return RunConfig(
        name="quick",
        seed=seed,
        vocab_size=512,
        block_size=64,
        target=ModelShape(hidden_size=64, num_layers=3, num_heads=2, intermediate_size=128),
        draft=ModelShape(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64),
        target_schedule=StageSchedule(steps=30, batch_size=4, peak_lr=3e-3, warmup_steps=3),
        draft_schedule=StageSchedule(steps=20, batch_size=4, peak_lr=3e-3, warmup_steps=2),
        max_train_code_files=24,
        max_train_prose_docs=4,
        eval_blocks_per_domain=4,
        sample_new_tokens=16,
        draft_generated_blocks=4,
        draft_generated_share=0.5,
        unlikelihood=Unlikelihood(weight=1.0, prompt_tokens=16, new_tokens=24),
    )


# Family v2 (measurements and reasoning in docs/notes/V2_PLAN.md).
V2_VOCAB = 8192
V2_TARGET = ModelShape(hidden_size=256, num_layers=8, num_heads=4, intermediate_size=704)
V2_DRAFT = ModelShape(hidden_size=256, num_layers=1, num_heads=4, intermediate_size=704)
V2_TARGET_STEPS = 1300  # x 8 blocks x 512 tokens = 5.3M tokens, ~1.4 epochs
V2_DRAFT_STEPS = 700  # 2.9M tokens


def v2_config(seed: int = DEFAULT_SEED) -> RunConfig:
    """Demo family v2: sized for ~2.5 hours on 2 CPU cores, heads included.

    The figures behind every number are in ``docs/notes/V2_PLAN.md``.
    """
    return RunConfig(
        name="v2",
        seed=seed,
        vocab_size=V2_VOCAB,
        block_size=512,
        target=V2_TARGET,
        draft=V2_DRAFT,
        target_schedule=StageSchedule(steps=V2_TARGET_STEPS, batch_size=8, peak_lr=2e-3, warmup_steps=100),
        draft_schedule=StageSchedule(steps=V2_DRAFT_STEPS, batch_size=8, peak_lr=2e-3, warmup_steps=60),
        early_exit_total_weight=0.5,
        # The exits' LM heads cost 2.6 layers each at this vocabulary: every
        # 8th position keeps their overhead near 20 % of a training step.
        early_exit_position_stride=8,
        prose_repeats=1,
        prose_source="docs",
    )


def gpu_config(seed: int = DEFAULT_SEED) -> RunConfig:
    """The GPU recipe (``--device cuda --dtype bfloat16``): < 8 minutes on one H200.

    Bigger only as far as ``assets/models/demo/`` stays <= 60 MB with the
    heads (which scale with the square of the target's hidden size); the
    rest of the budget goes into many more training tokens (estimate in
    ``docs/notes/V2_PLAN.md``, from FLOPs, not measured).
    """
    return RunConfig(
        name="gpu",
        seed=seed,
        vocab_size=V2_VOCAB,
        block_size=512,
        target=ModelShape(hidden_size=320, num_layers=10, num_heads=5, intermediate_size=864),
        draft=V2_DRAFT,
        # 49M tokens (~12 epochs: about the most repeated data still pays for)
        # and 25M distillation tokens.
        target_schedule=StageSchedule(steps=3000, batch_size=32, peak_lr=2e-3, warmup_steps=150),
        draft_schedule=StageSchedule(steps=1500, batch_size=32, peak_lr=2e-3, warmup_steps=75),
        early_exit_total_weight=0.5,
        prose_repeats=1,
        prose_source="docs",
    )


# Family v3: v2's corpus and tokenizer, a deep and narrow target. On a CPU a small model's forward costs
# mostly per-layer overhead (measured, one thread, HF eager forwards with a KV cache: a 1-layer drafter of
# width 192-256 takes 1.1-1.5 ms a token whatever its width, v2's 8 x 256 target 4.6-5.2 ms, 16 x 192
# 8.1-8.3 ms), so the drafter's relative cost c falls with the target's depth: ~0.26 against v2's target,
# ~0.14 against 16 layers, for about the same parameters and training FLOPs per token.
V3_TARGET = ModelShape(hidden_size=192, num_layers=16, num_heads=3, intermediate_size=512)
V3_DRAFT = ModelShape(hidden_size=192, num_layers=1, num_heads=3, intermediate_size=512)


def v3_config(seed: int = DEFAULT_SEED) -> RunConfig:
    """Demo family v3: v2's data with a 16-layer target, so that a 1-layer drafter costs c ~ 0.14 on a CPU."""
    return RunConfig(
        name="v3",
        seed=seed,
        vocab_size=V2_VOCAB,
        block_size=512,
        target=V3_TARGET,
        draft=V3_DRAFT,
        target_schedule=StageSchedule(steps=V2_TARGET_STEPS, batch_size=8, peak_lr=2e-3, warmup_steps=100),
        # v2's distillation loss was still falling at its last step: a longer run for the cheaper drafter.
        draft_schedule=StageSchedule(steps=1000, batch_size=8, peak_lr=2e-3, warmup_steps=60),
        # Half the draft's batches are the target's own text (2,000 continuations of 192 tokens, ~10 minutes
        # of one CPU thread), and the loss is the plain KL to the target: the draft learns the target's greedy
        # choices where they are drafted, not the corpus.
        draft_generated_blocks=1000, draft_generated_share=0.5, distill_temperature=1.0, distill_kl_weight=1.0,
        # Greedy text loops on most prompts without it; chosen on the development prompts (docs/notes/V2_PLAN.md).
        suggested_repetition_penalty=1.2,
        early_exit_total_weight=0.5,
        # At width 192 an exit's LM head costs ~3.6 layers: every 16th position keeps the 15 exits near
        # v2's share of a training step.
        early_exit_position_stride=16,
        prose_repeats=1,
        prose_source="docs",
    )


def v3_long_config(seed: int = DEFAULT_SEED) -> RunConfig:
    """v3 trained further: its target, undertrained after 1300 steps (held-out loss above v2's 8 x 256), continues
    for 1000 more at a lower peak rate; the draft is distilled (half on the target's own text) and the heads
    trained again on the result."""
    return dataclasses.replace(
        v3_config(seed), name="v3-long", target_init="v3",
        target_schedule=StageSchedule(steps=1000, batch_size=8, peak_lr=1e-3, warmup_steps=50))


def v3_ul_config(seed: int = DEFAULT_SEED) -> RunConfig:
    """v3-long's target fine-tuned against its own greedy loops (sequence-level unlikelihood, Welleck et al.
    2019: 4-grams repeated within 64-token continuations of 32-token prompts), beside the usual loss, at about
    the learning rate v3-long ended on; then the draft and the heads as for v3-long."""
    return dataclasses.replace(
        v3_long_config(seed), name="v3-ul", target_init="v3-long",
        target_schedule=StageSchedule(steps=200, batch_size=8, peak_lr=2e-4, warmup_steps=10, min_lr_ratio=0.5),
        # The penalty on top of the unlikelihood term broke most code on the development prompts.
        unlikelihood=Unlikelihood(weight=1.0), suggested_repetition_penalty=1.0)


CONFIGS = {"v1": full_config, "v2": v2_config, "v3": v3_config, "v3-long": v3_long_config, "v3-ul": v3_ul_config,
           "gpu": gpu_config}
DEFAULT_RUN = "v3"  # the bundled family


def select_config(run: str, quick: bool, seed: int = DEFAULT_SEED) -> RunConfig:
    """The named run, or the ``--quick`` miniature (the same for every run)."""
    return quick_config(seed) if quick else CONFIGS[run](seed)
