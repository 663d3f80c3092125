"""Markdown model card and ``playground.json`` for the demo model folder."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .checkpoint import atomic_write_json, atomic_write_text
from .evaluation import folder_megabytes
from .objectives import early_exit_weights

DRAFTER_HEADING = "## Drafter measurements"
DRAFTER_TODO = (
    "TODO: filled by the engine's measurement script (acceptance rates and "
    "speed-ups of each drafter measured with the real speculative-decoding engine)."
)
REBUILD_COMMAND = "python -m tools.train.demo_models"
# Extra arguments that rebuild each named run (v3 is the default run).
RUN_ARGUMENTS = {"v3": "", "v2": " --run v2", "v3-long": " && python -m tools.train.demo_models --run v3-long",
                 "v3-ul": " && python -m tools.train.demo_models --run v3-long"
                          " && python -m tools.train.demo_models --run v3-ul",
                 "full": " --run v1", "gpu": " --run gpu --device cuda --dtype bfloat16",
                 "quick": " --quick --out DIR"}


def rebuild_command(run_name: str) -> str:
    return REBUILD_COMMAND + RUN_ARGUMENTS.get(run_name, "")


def heldout_split(folder: Path, prose_source: str | None, docs_dir: Path | None, tool: str):
    """(prose source, corpus split) a measuring tool compares a family on: `prose_source`, else the one `folder`
    records, else pydoc. Raises PythonDocsMissing (with the install command) when the documentation is missing."""
    from .corpus import split_documents

    source = prose_source or recorded_prose_source(folder) or "pydoc"
    print(f"[{tool}] held-out prose: {source}", file=sys.stderr, flush=True)
    return source, split_documents(prose_source=source, docs_dir=docs_dir)


def write_playground_json(folder: Path, exit_depth: int, seed: int, prose_source: str = "pydoc",
                          repetition_penalty: float = 1.0) -> None:
    # prose_source: the corpus the family was trained on, so that tools training or measuring against
    # it (train_heads.py, evaluate_demo_models.py, measure_drafters.py) use the same text and held-out split.
    # repetition_penalty: where the window and `run` start (app/engine/loading/load.py `manifest_repetition`).
    suggestion = {"repetition_penalty": repetition_penalty} if repetition_penalty != 1.0 else {}
    atomic_write_json(folder / "playground.json", {
        "target": "target", "draft": "draft", "layer_skip_exit": exit_depth,
        "seed": seed, "trained_with": "tools/train/demo_models.py", "prose_source": prose_source, **suggestion})


def recorded_prose_source(folder: Path) -> str | None:
    """The prose source a family was trained on, as its folder records it; None when it records nothing.

    ``folder`` is the family folder or its ``target/``. Read from ``playground.json`` (``prose_source``),
    else from the corpus section of ``MODEL_CARD.md`` (cards written before playground.json recorded it).
    """
    folder = Path(folder)
    for family in (folder, folder.parent):
        manifest = family / "playground.json"
        if manifest.is_file():
            try:
                source = json.loads(manifest.read_text()).get("prose_source")
            except (OSError, ValueError, AttributeError):
                source = None
            if source is not None:
                return str(source)
        card = family / "MODEL_CARD.md"
        if card.is_file():
            for source, description in PROSE_DESCRIPTIONS.items():
                if card_prose_marker(description) in card.read_text():
                    return source
    return None


def card_prose_marker(description: str) -> str:
    """The fixed start of a prose description, as the card prints it (before any placeholder)."""
    return description.split("{", 1)[0].split("\n", 1)[0]


def existing_drafter_section(card: Path) -> str | None:
    """Keep measurements another tool already wrote when the card is rebuilt."""
    if not card.exists():
        return None
    match = re.search(rf"^{DRAFTER_HEADING}\n(.*?)(?=^## |\Z)", card.read_text(), re.S | re.M)
    if match is None or DRAFTER_TODO in match.group(1):
        return None
    return match.group(1).strip()


def upsert_section(card: Path, section: str) -> None:
    """Replace the card's section headed by `section`'s first line ("## ..."), or append it; the rest stays."""
    heading = section.split("\n", 1)[0]
    text = card.read_text() if card.exists() else ""
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section.rstrip("\n") + "\n\n", text)
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + section
    atomic_write_text(card, text.rstrip("\n") + "\n")


def percent(value: float) -> str:
    return f"{100 * value:.1f} %"


def model_table(report: dict) -> str:
    rows = ["| | target | draft |", "|---|---|---|"]
    for label, key in [("layers", "layers"), ("hidden size", "hidden_size"),
                       ("context length", "context_length"), ("parameters", "parameters"),
                       ("size on disk (MB)", "megabytes"), ("load time on CPU (s)", "load_seconds")]:
        rows.append(f"| {label} | {report['target'][key]:,} | {report['draft'][key]:,} |")
    return "\n".join(rows)


def heldout_table(domains: dict) -> str:
    rows = ["| model | code loss | code ppl | code top-1 agreement | prose loss | prose ppl | prose top-1 agreement |",
            "|---|---|---|---|---|---|---|"]
    for name in domains["code"]:
        code, prose = domains["code"][name], domains["prose"][name]
        label = {"target": "target (all layers)", "draft": "draft model"}.get(
            name, name.replace("exit_", "early exit after layer "))
        agreement = ("(reference)", "(reference)") if name == "target" else (
            percent(code["agreement"]), percent(prose["agreement"]))
        rows.append(f"| {label} | {code['loss']:.3f} | {code['perplexity']:.1f} | {agreement[0]} | "
                    f"{prose['loss']:.3f} | {prose['perplexity']:.1f} | {agreement[1]} |")
    return "\n".join(rows)


def exit_plans_table(plans: dict) -> str:
    rows = ["| exit E | draft step cost c | best K | idealised speed-up |", "|---|---|---|---|"]
    for depth, plan in plans.items():
        rows.append(f"| {depth} | {plan['cost']:.2f} | {plan['draft_length']} | {plan['speedup']:.2f}x |")
    return "\n".join(rows)


def quality_bars(evaluation: dict) -> str:
    code = evaluation["domains"]["code"]
    exits = {k: v["agreement"] for k, v in code.items() if k.startswith("exit_")}
    best_exit = max(exits, key=exits.get)
    valid = [f"{s['valid_lines']}/{s['lines']}" for s in evaluation["samples"]]
    checks = [
        (code["draft"]["agreement"] >= 0.60,
         f"draft top-1 agreement on held-out code >= 60 %: {percent(code['draft']['agreement'])}"),
        (exits[best_exit] >= 0.50,
         f"at least one early exit >= 50 %: best is {best_exit.replace('exit_', 'layer ')} "
         f"at {percent(exits[best_exit])}"),
        (evaluation["folder_megabytes"] < 40,
         f"`assets/models/demo/` under 40 MB: {evaluation['folder_megabytes']:.1f} MB"),
        (max(evaluation["target"]["load_seconds"], evaluation["draft"]["load_seconds"]) < 1,
         f"each model loads in under a second: target {evaluation['target']['load_seconds']} s, "
         f"draft {evaluation['draft']['load_seconds']} s"),
    ]
    lines = [f"- [{'x' if ok else ' '}] {text}" for ok, text in checks]
    lines.append(f"- greedy code completions, lines forming valid Python (prefix, open block allowed): "
                 f"{', '.join(valid)} (see samples below)")
    return "\n".join(lines)


def samples_section(samples: list[dict]) -> str:
    parts = []
    for number, sample in enumerate(samples, 1):
        text = (sample["prompt"] + sample["completion"]).replace("```", "` ` `")
        parts.append(f"Sample {number} (prompt = first {sample['prompt'].count(chr(10)) + 1} line(s); "
                     f"{sample['valid_lines']} of {sample['lines']} lines parse):\n\n```python\n{text}\n```")
    return "\n\n".join(parts)


PROSE_DESCRIPTIONS = {
    "pydoc": """- prose: `pydoc_data/topics.py`, the Python language reference rendered as
  plain text ({weighting}).""",
    "docs": """- prose: the Python {docs_version} documentation installed on the build machine
  (Debian's `python3.11-doc`): the tutorial, the library reference, the
  language reference, the HOWTOs, the FAQ, "Using Python", the glossary and
  "Installing Python modules", read from the reST sources Sphinx ships with
  the HTML (or, without them, the main text of the HTML pages) and reduced
  to the text a reader sees (markup, index entries, comments and layout
  tables removed; {weighting}).""",
}


def licence_lines(corpus: dict) -> str:
    licences = corpus.get("licences") or {"stdlib code": "PSF License Agreement"}
    return "\n".join(f"- {source}: {licence}" for source, licence in licences.items())


def corpus_section(corpus: dict, prose_repeats: int = 2) -> str:
    source = corpus.get("prose_source", "pydoc")
    weighting = f"upweighted {prose_repeats}x in training" if prose_repeats > 1 else "not upweighted"
    prose = PROSE_DESCRIPTIONS[source].format(weighting=weighting,
                                              docs_version=corpus.get("docs_version") or "3")
    heldout_percent = "12 (prose topics)" if source == "pydoc" else "6 (documentation pages)"
    return f"""Text from the **CPython {corpus['python_version']} standard library** of the
interpreter that ran the build (found with `sysconfig.get_paths()["stdlib"]`)
and its documentation, nothing downloaded by the build:

- code: every `*.py` file except the folders `test/`, `tests/`, `idlelib/`,
  `encodings/` (codec tables), `pydoc_data/`, `site-packages/` and the
  generated `_sysconfigdata*` modules;
{prose}

| split | documents | characters |
|---|---|---|
| train code | {corpus['train_code']['documents']} | {corpus['train_code']['characters']:,} |
| train prose | {corpus['train_prose']['documents']} | {corpus['train_prose']['characters']:,} |
| held-out code | {corpus['heldout_code']['documents']} | {corpus['heldout_code']['characters']:,} |
| held-out prose | {corpus['heldout_prose']['documents']} | {corpus['heldout_prose']['characters']:,} |

The held-out split is by document: a document is held out when
`sha1(name) % 100` is below 5 (code) or {heldout_percent}, so it does not
depend on the seed. Held-out code files: {', '.join(f'`{n}`' for n in corpus['heldout_code_names'])}.
Held-out prose: {', '.join(f'`{n}`' for n in corpus['heldout_prose_names'])}.

**Licence.** Every source and its licence:

{licence_lines(corpus)}

See `LICENSE.txt` in the stdlib folder and `license.html` in the
documentation. These weights and the tokenizer are derived from that text
only and are intended as a demo asset of this project; treat them under the
same terms."""


def training_section(config: dict, training: dict) -> str:
    weights = early_exit_weights(config["target"]["num_layers"], config["early_exit_total_weight"])
    exit_text = ", ".join(f"layer {d}: {w:.3f}" for d, w in weights.items())
    ts, ds = config["target_schedule"], config["draft_schedule"]
    return f"""- Seed: `{config['seed']}` (model initialisation, document order, batch order).
- Hardware: {training['hardware']}; {training.get('precision', 'float32')} training, weights exported as
  bfloat16. Wall times below were measured on that shared machine and vary
  with its load.
- Tokenizer: byte-level BPE (`tokenizers`), vocabulary {config['vocab_size']},
  `<|endoftext|>` is BOS, EOS and padding; encoding prepends it. Decoding
  round-trips any UTF-8 text.
- Sequence packing: documents joined with `<|endoftext|>` and cut into
  blocks of {config['block_size']} tokens.
- Target: {ts['steps']} steps x {ts['batch_size']} blocks ({training['target']['tokens']:,} tokens),
  AdamW (betas 0.9/0.95, weight decay {ts['weight_decay']}), peak LR {ts['peak_lr']},
  {ts['warmup_steps']} warmup steps then cosine to {ts['min_lr_ratio']}x, gradient clip {ts['grad_clip']}.
  Early-exit loss (LayerSkip style): cross-entropy of final norm + LM head
  applied after each intermediate layer, weights {exit_text}, computed on
  every {config['early_exit_position_stride']}th position (rotating offset) to save CPU time.
  Wall time {training['target']['seconds'] / 60:.1f} min.
- Draft: distilled from the (bfloat16-rounded) target: {config['distill_kl_weight']} x KL to the
  target's distribution softened at temperature {config['distill_temperature']} (scaled by T^2)
  + {1 - config['distill_kl_weight']:.1f} x cross-entropy; {ds['steps']} steps x {ds['batch_size']} blocks
  ({training['draft']['tokens']:,} tokens), peak LR {ds['peak_lr']}.{draft_data_text(config)}
  Wall time {training['draft']['seconds'] / 60:.1f} min.
- Total wall time of the build: {training['total_seconds'] / 60:.1f} min."""


def draft_data_text(config: dict) -> str:
    """What the draft's batches hold besides the corpus (tools/train/demo_training/generation.py)."""
    blocks = config.get("draft_generated_blocks", 0)
    if not blocks:
        return ""
    penalty = config.get("suggested_repetition_penalty", 1.0)
    written = "" if penalty == 1.0 else f",\n  written under the family's suggested repetition penalty, {penalty}"
    return (f"\n  {config['draft_generated_share']:.0%} of its batches are the target's own text: {blocks:,} blocks,"
            f"\n  each two continuations of corpus prefixes (a quarter prompt), half greedy, half sampled at T = 0.8"
            f"{written}.")


def render_card(config: dict, corpus: dict, training: dict, evaluation: dict, drafter_section: str | None) -> str:
    exit_depth = evaluation["recommended_exit"]
    return f"""# Speculative Decoding Playground: offline demo models

Two tiny Llama models sharing one tokenizer, trained from scratch on CPU so
that the playground works without any model hub:

- `target/`: `LlamaForCausalLM` trained with an early-exit loss, so its first
  E layers + final norm + LM head form a self-speculative (layer-skip) drafter;
- `draft/`: a much smaller `LlamaForCausalLM` distilled from the target;
- `playground.json`: defaults for the engine (recommended exit `layer_skip_exit = {exit_depth}`).

They are demo assets for visualising speculative decoding, not useful
language models.

## Sizes

{model_table(evaluation)}

Target + draft with their tokenizers: {evaluation['models_megabytes']:.1f} MB (safetensors,
bfloat16, tied embeddings); whole `assets/models/demo/` folder when this card
was written: {evaluation['folder_megabytes']:.1f} MB.

## Corpus and licence

{corpus_section(corpus, config.get('prose_repeats', 2))}

## Training

{training_section(config, training)}

## Held-out evaluation

Computed by `tools/train/evaluate_demo_models.py` on {evaluation['domains']['code']['target']['tokens']:,}
code tokens and {evaluation['domains']['prose']['target']['tokens']:,} prose tokens (blocks of the
held-out files, teacher forced, float32). Loss is mean cross-entropy in nats
per token; top-1 agreement is the share of positions where the model's argmax
equals the target's argmax (the per-token acceptance rate of greedy drafting).

{heldout_table(evaluation['domains'])}

Recommended early exit: **E = {exit_depth}** (`layer_skip_exit` in
`playground.json`), the depth maximising the idealised greedy speed-up
`(1 - a^(K+1)) / (1 - a) / (K*c + 1)`, where a is the code agreement, K the
draft length (best of 1..8) and c = (E + h) / (L + h) the cost of a draft step
relative to a full pass (L = {evaluation['target']['layers']} layers; the LM head costs
h = {evaluation['lm_head_in_layers']} layers' worth of multiply-adds at this size). It ignores
per-pass overheads and KV-cache reuse; the engine measures real numbers.

{exit_plans_table(evaluation['exit_plans'])}

## Quality bars

{quality_bars(evaluation)}

## Greedy completions of code prompts (target)

{samples_section(evaluation['samples'])}

Prompts end without a trailing newline on purpose: byte-level BPE merges a
newline with the next line's indentation, so a prompt ending in a bare `\\n`
is off-distribution and the model tends to continue with an unindented line.

{DRAFTER_HEADING}

{drafter_section or DRAFTER_TODO}

## Reproduce

```
{rebuild_command(config['name'])}
python -m tools.train.evaluate_demo_models
```

The build resumes from checkpoints in `~/.cache/spec-playground/demo_training/`
(`--cache-dir`) when rerun;
`--quick --out DIR` runs a one-minute miniature of the same pipeline.
"""


def write_card(folder: Path, config: dict, corpus: dict, training: dict, evaluation: dict) -> None:
    card = folder / "MODEL_CARD.md"
    evaluation = {**evaluation, "folder_megabytes": folder_megabytes(folder)}
    text = render_card(config, corpus, training, evaluation, existing_drafter_section(card))
    atomic_write_text(card, text)
