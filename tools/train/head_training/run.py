"""Every number that shapes the data and the trained heads, and the sizes of run: CPU, GPU and the tests' miniature."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from app.engine.drafters.heads import FAMILIES

from ..demo_training.config import StageSchedule, full_config, short_key, v2_config
from ..demo_training.corpus import PROSE_SOURCES

REPO_ROOT = Path(__file__).resolve().parents[3]
DEMO_TARGET = REPO_ROOT / "assets" / "models" / "demo" / "target"
DEMO_HEADS = REPO_ROOT / "assets" / "models" / "demo" / "heads"
# Prose weighting per prose source, as the demo families were trained on it (v1: the pydoc topics twice;
# v2: the documentation once), so the heads see the target's own corpus mixture.
PROSE_REPEATS = {"pydoc": full_config().prose_repeats, "docs": v2_config().prose_repeats}


@dataclasses.dataclass(frozen=True)
class HeadsRun:
    """Every number that shapes the data and the trained heads."""

    name: str
    seed: int
    seq_len: int
    corpus_sequences: int
    generated_sequences: int  # target continuations of corpus prefixes (half greedy, half sampled)
    prompt_len: int
    max_code_files: int | None
    max_prose_docs: int | None
    schedules: dict  # family -> StageSchedule fields
    arch: dict  # family -> constructor overrides
    eagle_unroll: int = 3
    dflash_anchors: int = 32
    loss_rows: float = 0.5  # share of positions given to the LM head per step (it dominates the cost)
    # The corpus prose (demo_training.corpus): the one the target was trained on.
    prose_source: str = "pydoc"
    prose_repeats: int = 2
    # The repetition penalty the target's continuations are written under: the one its family suggests, so
    # that the heads learn text decoded as the window decodes it.
    generation_penalty: float = 1.0
    # Share of each label moved onto the target's argmax: a greedy verifier accepts a draft only where the
    # argmaxes agree, which the soft labels alone weigh no more than any other mass.
    hard_label_weight: float = 0.0
    # The repetition penalty the labels are taken under and the heads' logits are scored under: the window applies
    # the family's penalty to the target and to every drafter alike, so a head is right where its penalised argmax
    # is the target's penalised argmax (a quarter of the greedy positions of the demo family's text, penalty 1.2,
    # are not the target's plain argmax).
    label_penalty: float = 1.0
    # Heads a run continues from instead of a fresh initialisation: family -> checksum of the weights it starts
    # from (`family.head_checksum`); train_heads.py --init-from fills it in.
    head_init: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.prose_source not in PROSE_SOURCES:
            raise ValueError(f"unknown prose source {self.prose_source!r}; expected one of {PROSE_SOURCES}")

    def fingerprint(self) -> str:
        return short_key(dataclasses.asdict(self), ADDED_LATER)

    def text_fingerprint(self) -> str:
        """The key of the training text (corpus blocks and the target's continuations)."""
        return short_key({k: getattr(self, k) for k in TEXT_KEYS}, ADDED_LATER)

    def data_fingerprint(self) -> str:
        """The key of the text with its features and labels."""
        return short_key({k: getattr(self, k) for k in (*TEXT_KEYS, "label_penalty")}, ADDED_LATER)


TEXT_KEYS = ("seed", "seq_len", "corpus_sequences", "generated_sequences", "prompt_len", "max_code_files",
             "max_prose_docs", "prose_source", "prose_repeats", "generation_penalty")


# Fields added after heads were shipped: left at these values, they stay out of the keys (the keys stay valid).
ADDED_LATER = {"generation_penalty": 1.0, "hard_label_weight": 0.0, "label_penalty": 1.0, "head_init": {}}


def schedule(steps: int, lr: float, batch: int) -> dict:
    return dataclasses.asdict(StageSchedule(steps=steps, batch_size=batch, peak_lr=lr,
                                            warmup_steps=max(2, steps // 20), weight_decay=0.01))


def prose_repeats(prose_source: str) -> int:
    if prose_source not in PROSE_REPEATS:
        raise ValueError(f"unknown prose source {prose_source!r}; expected one of {PROSE_SOURCES}")
    return PROSE_REPEATS[prose_source]


def full_run(seed: int, prose_source: str = "pydoc") -> HeadsRun:
    """Sized for about 20 minutes on 2 CPU cores (shared with other jobs), all four families."""
    return HeadsRun(
        name="full", seed=seed, prose_source=prose_source, prose_repeats=prose_repeats(prose_source),
        seq_len=128, corpus_sequences=2400, generated_sequences=800, prompt_len=32,
        max_code_files=None, max_prose_docs=None,
        schedules={"medusa": schedule(1000, 3e-3, 8), "mtp": schedule(800, 2e-3, 8),
                   "eagle": schedule(900, 2e-3, 8), "dflash": schedule(1200, 2e-3, 8)},
        arch={"medusa": {"num_heads": 4}, "mtp": {"depths": 4, "intermediate": 256, "window": 16},
              "eagle": {"intermediate": 384, "window": 96},
              "dflash": {"layers": 2, "intermediate": 384, "block_size": 6, "window": 64}},
        loss_rows=0.25, dflash_anchors=16,
    )


def long_run(seed: int, prose_source: str = "pydoc") -> HeadsRun:
    """`full_run` with twice the data (a third of it the target's own text) and 3-4x the steps, and a wider EAGLE
    block: about 30 minutes of one CPU thread for EAGLE alone, data included, and about 80 for all four.

    The heads of `full_run` were still improving at their last step (EAGLE's loss fell 3 % over its last
    150 steps), and they had seen each sequence about twice. Tried for EAGLE on v3: a lower loss, but it
    drafted worse than `full_run`'s (alpha 0.72 against 0.75 on development prompts; docs/notes/V2_PLAN.md).
    """
    return dataclasses.replace(
        full_run(seed, prose_source), name="long", corpus_sequences=4800, generated_sequences=2400,
        schedules={"medusa": schedule(3000, 3e-3, 8), "mtp": schedule(2400, 2e-3, 8),
                   "eagle": schedule(3600, 2e-3, 8), "dflash": schedule(3600, 2e-3, 8)},
        arch={**full_run(seed, prose_source).arch, "eagle": {"intermediate": 512, "window": 96}})


def broad_run(seed: int, prose_source: str = "pydoc") -> HeadsRun:
    """`full_run`'s heads on seven times its corpus sequences (about half the corpus), half of each label moved
    onto the target's argmax; 3-4x `full_run`'s steps (each sequence seen about twice), EAGLE's 13x (about
    five times). About 70 minutes of one CPU thread for EAGLE alone, 25 for MTP, data not included.

    On the soft labels alone more data and more steps lowered the training loss and drafted worse (EAGLE's
    alpha on development prompts 0.74 -> 0.72, as `long_run`'s did): a small head spends what it learns on
    the labels' tail. With half of each label on the argmax, the one token a greedy verifier accepts, the
    same data and steps drafted better (0.74 -> 0.79; docs/notes/V2_PLAN.md, "Hard labels"). With the labels also taken
    under the family's repetition penalty (`label_penalty`, set by train_heads.py) and three times the
    steps, EAGLE reached 0.847 on development prompts ("Labels under the penalty"). The average of that head and
    the same head continued 10,000 steps at peak rate 1e-3 (`train_heads.py --init-from`, `average_heads.py`)
    reached 0.852 ("Longer training, and averaged heads"). The shipped EAGLE head is the average of that average
    and itself continued 3,000 steps on every corpus block (`--corpus-sequences 28000`): 0.855 ("Every corpus
    block").
    """
    full = full_run(seed, prose_source)
    return dataclasses.replace(
        full, name="broad", corpus_sequences=16000, generated_sequences=2400, hard_label_weight=0.5,
        schedules={"medusa": schedule(4000, 3e-3, 8), "mtp": schedule(3200, 2e-3, 8),
                   "eagle": schedule(12000, 2e-3, 8), "dflash": schedule(4800, 2e-3, 8)})


def gpu_run(seed: int, prose_source: str = "pydoc") -> HeadsRun:
    """Sized for a few minutes of one H200 (``--device cuda --dtype bfloat16``), all four families.

    For the GPU family (target 10 x 320, ``gpu_config``). An estimate from FLOPs, not measured (no GPU was
    available): ~2.4e15 FLOP in all (docs/notes/V2_PLAN.md, "GPU recipe"), 1-3 minutes of training plus under a
    minute for the data. Against `full_run`: 3.75x the training sequences at twice the length (12,000 x 256
    tokens, 3.1M, about 80 % of the corpus; a quarter of them the target's own continuations), 16-20x the
    training tokens per family (64-77k sequences, 5-6 passes over the data), every other position scored
    (`loss_rows` 0.5), and blocks with an MLP at least twice the hidden size (the CPU run's were sized for
    hidden 128). The heads come to ~9.9M parameters, ~20 MB in fp16, what the family's 60 MB budget leaves.
    """
    return HeadsRun(
        name="gpu", seed=seed, prose_source=prose_source, prose_repeats=prose_repeats(prose_source),
        seq_len=256, corpus_sequences=9000, generated_sequences=3000, prompt_len=64,
        max_code_files=None, max_prose_docs=None,
        schedules={"medusa": schedule(1000, 3e-3, 64), "mtp": schedule(1000, 2e-3, 64),
                   "eagle": schedule(1000, 2e-3, 64), "dflash": schedule(1200, 2e-3, 64)},
        arch={"medusa": {"num_heads": 4}, "mtp": {"depths": 4, "intermediate": 640, "window": 16},
              "eagle": {"intermediate": 864, "window": 96},
              "dflash": {"layers": 2, "intermediate": 864, "block_size": 6, "window": 64}},
        loss_rows=0.5, dflash_anchors=32,
    )


RUNS = {"full": full_run, "long": long_run, "broad": broad_run, "gpu": gpu_run}


def quick_run(seed: int, prose_source: str = "pydoc") -> HeadsRun:
    """A miniature end-to-end run for the test suite."""
    return HeadsRun(
        name="quick", seed=seed, prose_source=prose_source, prose_repeats=prose_repeats(prose_source),
        seq_len=48, corpus_sequences=12, generated_sequences=4, prompt_len=16,
        max_code_files=8, max_prose_docs=2,
        schedules={family: schedule(40, 5e-3, 4) for family in FAMILIES},
        arch={"medusa": {"num_heads": 3}, "mtp": {"depths": 2, "intermediate": 64, "window": 8},
              "eagle": {"intermediate": 64, "window": 32},
              "dflash": {"layers": 1, "intermediate": 64, "block_size": 4, "window": 16}},
        eagle_unroll=2, dflash_anchors=4,
    )


def log(message: str) -> None:
    print(f"[train-heads] {message}", file=sys.stderr, flush=True)
