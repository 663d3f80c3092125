"""Tests of the demo-model build script and of the committed demo models.

The quick build runs the whole pipeline (corpus, tokenizer, early-exit
target, distilled draft, export, evaluation, card) in miniature, in a
subprocess, exactly as a user would run it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_MODULE = ["-m", "tools.train.demo_models"]  # run from the repository root
COMMITTED_MODELS = REPO_ROOT / "assets" / "models" / "demo"
QUICK_BUILD_LIMIT_S = 180
UTF8_SAMPLE = "def f(x):\n\treturn x  # héllo 世界 🎉 \x00\u200b"


@pytest.fixture
def quiet_transformers():
    """No loading progress bar: tqdm's monitor thread would outlive the test."""
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    yield
    if was_enabled:
        logging.enable_progress_bar()


def offline_environment() -> dict:
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


@pytest.fixture(scope="module")
def quick_build(tmp_path_factory):
    """Run ``--quick`` once for the module; returns (out folder, process, seconds)."""
    root = tmp_path_factory.mktemp("demo_build")
    out = root / "models"
    command = [sys.executable, *BUILD_MODULE, "--quick", "--out", str(out),
               "--cache-dir", str(root / "cache")]
    started = time.monotonic()
    process = subprocess.run(command, env=offline_environment(), capture_output=True, text=True,
                             timeout=2 * QUICK_BUILD_LIMIT_S, cwd=REPO_ROOT)
    return out, process, time.monotonic() - started


def test_quick_build_succeeds_within_time_limit(quick_build):
    _, process, seconds = quick_build
    assert process.returncode == 0, process.stderr[-3000:]
    assert seconds < QUICK_BUILD_LIMIT_S


def test_quick_build_writes_playground_json_and_card(quick_build):
    out, process, _ = quick_build
    assert process.returncode == 0, process.stderr[-3000:]
    playground = json.loads((out / "playground.json").read_text())
    assert playground["target"] == "target" and playground["draft"] == "draft"
    assert playground["trained_with"] == "tools/train/demo_models.py"
    assert 1 <= playground["layer_skip_exit"] < 3  # quick target has 3 layers
    assert playground["prose_source"] == "pydoc"  # the corpus, for the heads and the evaluation tools
    card = (out / "MODEL_CARD.md").read_text()
    assert "## Drafter measurements" in card and "TODO" in card
    assert "50% of its batches are the target's own text: 4 blocks" in card  # the quick run's draft data


@pytest.mark.parametrize("name", ["target", "draft"])
def test_quick_models_load_and_generate(quick_build, name, quiet_transformers):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, process, _ = quick_build
    assert process.returncode == 0, process.stderr[-3000:]
    model = AutoModelForCausalLM.from_pretrained(out / name)
    tokenizer = AutoTokenizer.from_pretrained(out / name)
    assert model.dtype == torch.bfloat16
    inputs = tokenizer("import os\n", return_tensors="pt")
    generated = model.generate(**inputs, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert generated.shape[1] == inputs.input_ids.shape[1] + 4


def test_quick_tokenizer_round_trips_utf8(quick_build, quiet_transformers):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    out, process, _ = quick_build
    assert process.returncode == 0, process.stderr[-3000:]
    tokenizer = AutoTokenizer.from_pretrained(out / "draft")
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert tokenizer.bos_token == tokenizer.eos_token == "<|endoftext|>"
    ids = tokenizer(UTF8_SAMPLE).input_ids
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == UTF8_SAMPLE


COMMITTED_CHECK = """
import json, sys, time
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
folder = Path(sys.argv[1])
playground = json.loads((folder / "playground.json").read_text())
for name in (playground["target"], playground["draft"]):
    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder / name)
    tokenizer = AutoTokenizer.from_pretrained(folder / name)
    print(name, "loaded in", round(time.perf_counter() - started, 3), "s")
    inputs = tokenizer("def main():\\n", return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape[1] == inputs.input_ids.shape[1] + 4
    if name == playground["target"]:
        assert 1 <= playground["layer_skip_exit"] < model.config.num_hidden_layers
print("ok")
"""


@pytest.mark.skipif(not (COMMITTED_MODELS / "playground.json").exists(),
                    reason="demo models not built yet (python -m tools.train.demo_models)")
def test_committed_demo_models_load_offline():
    process = subprocess.run([sys.executable, "-c", COMMITTED_CHECK, str(COMMITTED_MODELS)],
                             env=offline_environment(), capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr[-3000:]
    assert process.stdout.strip().endswith("ok")


@pytest.mark.skipif(not COMMITTED_MODELS.exists(), reason="demo models not built yet")
def test_committed_demo_models_fit_size_budget():
    total = sum(p.stat().st_size for p in COMMITTED_MODELS.rglob("*") if p.is_file())
    assert total < 40e6


# ----------------------------------------------------------------- v2 corpus

REST_SAMPLE = """.. _tut-example:

.. index::
   single: example

Example Section
===============

Use :func:`~os.path.join` and :keyword:`!for` with ``literal`` text; see
:ref:`the tutorial <tut-intro>` and :pep:`8`. For example::

   >>> print("hi")
   hi

.. note::
   Notes keep their text.

.. function:: spam(eggs)
   :noindex:

   Return spam.

.. This is a comment
   spanning two lines.

Last paragraph.
"""


def test_rest_sources_reduce_to_reader_text():
    from tools.train.demo_training.python_docs import rest_to_text

    text = rest_to_text(REST_SAMPLE)
    assert "Example Section\n\nUse join and for with literal text; see\nthe tutorial and PEP 8." in text
    assert "For example:\n\n   >>> print(\"hi\")\n   hi" in text
    assert "Note:\n   Notes keep their text." in text
    assert "spam(eggs)\n\n   Return spam." in text
    for markup in (".. ", ":func:", "``", "====", "tut-example", "single: example", "comment", ":noindex:"):
        assert markup not in text
    assert text.endswith("Last paragraph.\n")


HTML_SAMPLE = """<html><head><title>t</title><script>var x = 1;</script></head><body>
<div class="related" role="navigation"><ul><li><a href="index.html">index</a></li></ul></div>
<div class="body" role="main"><section><h1>Title<a class="headerlink" href="#t">¶</a></h1>
<p>First   paragraph
 of text.</p><pre>def f():
    return 1</pre></section></div>
<div class="sphinxsidebar"><p>Sidebar</p></div><div class="footer">Footer</div></body></html>"""


def test_html_pages_keep_main_text_and_drop_navigation():
    from tools.train.demo_training.python_docs import html_to_text

    text = html_to_text(HTML_SAMPLE)
    assert text == "Title\n\nFirst paragraph of text.\n\ndef f():\n    return 1\n"


def make_docs_tree(root: Path, with_sources: bool) -> Path:
    (root / "library").mkdir(parents=True)
    (root / "c-api").mkdir()
    (root / "library" / "spam.html").write_text(HTML_SAMPLE.replace("Title", "Spam"))
    (root / "c-api" / "abstract.html").write_text(HTML_SAMPLE)  # not a prose section
    if with_sources:
        (root / "_sources" / "library").mkdir(parents=True)
        (root / "_sources" / "library" / "spam.rst.txt").write_text(REST_SAMPLE)
    return root


@pytest.mark.parametrize("with_sources", [True, False])
def test_docs_documents_prefer_sources_and_fall_back_to_html(tmp_path, with_sources):
    from tools.train.demo_training.python_docs import docs_documents

    documents = docs_documents(make_docs_tree(tmp_path, with_sources))
    assert [(d.name, d.domain) for d in documents] == [("docs:library/spam", "prose")]
    assert ("Example Section" in documents[0].text) == with_sources
    assert ("Spam" in documents[0].text) != with_sources


def test_missing_docs_error_names_the_install_command(tmp_path):
    from tools.train.demo_training.python_docs import PythonDocsMissing, docs_documents, docs_package

    with pytest.raises(PythonDocsMissing) as error:
        docs_documents(tmp_path / "absent")
    assert f"sudo apt-get install {docs_package()}" in str(error.value)
    assert docs_package() == f"python{sys.version_info.major}.{sys.version_info.minor}-doc"


def test_build_without_docs_fails_fast_with_the_install_command(tmp_path):
    command = [sys.executable, *BUILD_MODULE, "--out", str(tmp_path / "out"),
               "--cache-dir", str(tmp_path / "cache"), "--docs-dir", str(tmp_path / "absent")]
    process = subprocess.run(command, env=offline_environment(), capture_output=True, text=True,
                             timeout=120, cwd=REPO_ROOT)
    assert process.returncode == 2
    assert "apt-get install python3" in process.stderr and "Traceback" not in process.stderr
    assert not (tmp_path / "out").exists()


def test_heldout_split_is_by_document_name_and_stable():
    from tools.train.demo_training.corpus import DOCS_HELDOUT_PERCENT, is_heldout

    names = [f"docs:library/module{i}" for i in range(2000)]
    held = [n for n in names if is_heldout(n, DOCS_HELDOUT_PERCENT)]
    assert held == [n for n in names if is_heldout(n, DOCS_HELDOUT_PERCENT)]
    assert 0.04 < len(held) / len(names) < 0.08


def test_corpus_records_a_licence_for_every_source():
    from tools.train.demo_training.corpus import source_licences

    for source, expected in (("pydoc", "pydoc topics"), ("docs", "Python documentation")):
        licences = source_licences(source)
        assert set(licences) == {"stdlib code", expected}
        assert all("PSF License" in text for text in licences.values())


HELDOUT_PROMPTS = REPO_ROOT / "tools" / "train" / "demo_training" / "heldout_prompts.json"


def test_heldout_prompts_cover_code_and_prose_and_are_not_in_the_corpus():
    from tools.train.demo_training.corpus import split_documents
    from tools.train.demo_training.python_docs import PythonDocsMissing

    prompts = json.loads(HELDOUT_PROMPTS.read_text())["prompts"]
    assert len(prompts) >= 10 and len({p["id"] for p in prompts}) == len(prompts)
    assert {p["domain"] for p in prompts} == {"code", "prose"}
    assert min(sum(p["domain"] == d for p in prompts) for d in ("code", "prose")) >= 5
    try:
        split = split_documents(prose_source="docs")
    except PythonDocsMissing:
        split = split_documents()
    corpus = "\n".join(d.text for d in split.train + split.heldout_code + split.heldout_prose)
    for prompt in prompts:
        assert not prompt["text"].endswith("\n")
        assert prompt["text"][:48] not in corpus, prompt["id"]


# ---------------------------------------------------------- v2 configuration

def shape_parameters(shape, vocab: int) -> int:
    """Parameters of a tied-embedding Llama of ``shape`` (norms included)."""
    layer = 4 * shape.hidden_size**2 + 3 * shape.hidden_size * shape.intermediate_size + 2 * shape.hidden_size
    return shape.num_layers * layer + vocab * shape.hidden_size + shape.hidden_size


@pytest.mark.parametrize("run", ["v1", "v2", "v3", "gpu"])
def test_family_leaves_room_for_heads_within_60_mb(run):
    from tools.train.demo_training.config import select_config

    config = select_config(run, quick=False)
    megabytes = 2 * sum(shape_parameters(s, config.vocab_size) for s in (config.target, config.draft)) / 1e6
    # Learned heads are about 1.3 target layers plus 0.6 embedding matrices
    # each (v1: 3.2 MB beside a 3.5 MB target), two tokenizers about 1 MB.
    assert megabytes < 40, megabytes


def test_runs_are_frozen_and_keyed_apart():
    from tools.train.demo_training.config import CONFIGS, DEFAULT_RUN, select_config

    configs = {name: select_config(name, quick=False) for name in CONFIGS}
    assert DEFAULT_RUN == "v3" and configs["v3"].prose_source == "docs"
    assert len({c.target_fingerprint() for c in configs.values()}) == len(configs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        configs["v2"].seed = 1  # type: ignore[misc]
    assert select_config("gpu", quick=True) == select_config("v2", quick=True)


def test_default_cache_is_outside_the_repository(monkeypatch, tmp_path):
    from tools.train import demo_models as train_demo_models
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    default = train_demo_models.default_cache_dir()
    assert default == Path.home() / ".cache" / "spec-playground" / "demo_training"
    assert REPO_ROOT not in default.parents
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert train_demo_models.default_cache_dir() == tmp_path / "spec-playground" / "demo_training"
    from tools.train.demo_training.config import DEFAULT_RUN

    assert train_demo_models.parse_args([]).run == DEFAULT_RUN == train_demo_models.DEFAULT_RUN
    with pytest.raises(SystemExit):
        train_demo_models.parse_args(["--run", "gpu"])  # sized for a GPU: needs --device cuda


# ------------------------------------------- training loop: dtype and resume

class Killed(Exception):
    """Stands in for the process being killed mid-run."""


def tiny_stage(folder: Path, runtime, kill_at_step: int | None = None):
    """Six steps of a tiny model; checkpoints after every step."""
    import torch

    from tools.train.demo_training.config import ModelShape, StageSchedule
    from tools.train.demo_training.loop import train_stage
    from tools.train.demo_training.models import build_model, llama_config

    model = build_model(llama_config(ModelShape(32, 1, 2, 64), 64, 16, 0), seed=0)
    blocks = torch.randint(1, 64, (12, 16), generator=torch.Generator().manual_seed(0))
    schedule = StageSchedule(steps=6, batch_size=2, peak_lr=1e-3, warmup_steps=1)

    def loss_fn(m, batch, step):
        if step == kill_at_step:
            raise Killed
        loss = m(input_ids=batch, labels=batch).loss
        return loss, loss.item()

    train_stage("tiny", model, loss_fn, blocks, schedule, 0, folder / "stage.ckpt", 0.0, runtime)
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_training_resumes_exactly_from_a_checkpoint(tmp_path):
    import torch

    from tools.train.demo_training.runtime import CPU

    straight = tiny_stage(tmp_path / "straight", CPU)
    with pytest.raises(Killed):
        tiny_stage(tmp_path / "resumed", CPU, kill_at_step=3)
    assert torch.load(tmp_path / "resumed" / "stage.ckpt", weights_only=False)["state"]["step"] == 3
    resumed = tiny_stage(tmp_path / "resumed", CPU)
    assert all(torch.equal(straight[name], resumed[name]) for name in straight)


def test_bfloat16_autocast_trains_on_cpu(tmp_path):
    import torch

    from tools.train.demo_training.runtime import Runtime

    weights = tiny_stage(tmp_path, Runtime("cpu", "bfloat16"))
    assert all(w.dtype == torch.float32 and w.device.type == "cpu" for w in weights.values())
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_gpu_recipe_runs_on_cpu_at_quick_size_in_bfloat16(tmp_path, quiet_transformers):
    """The GPU code path (bfloat16 autocast, device moves) end to end, on the CPU."""
    from transformers import AutoModelForCausalLM

    command = [sys.executable, *BUILD_MODULE, "--run", "gpu", "--quick", "--device", "cpu",
               "--dtype", "bfloat16", "--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    process = subprocess.run(command, env=offline_environment(), capture_output=True, text=True,
                             timeout=2 * QUICK_BUILD_LIMIT_S, cwd=REPO_ROOT)
    assert process.returncode == 0, process.stderr[-3000:]
    assert "bfloat16" in process.stderr  # the run says how it trains
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "draft")
    assert model.config.num_hidden_layers == 1


def test_a_run_starts_its_target_from_another_runs_finished_target(tmp_path, monkeypatch):
    """`target_init`: the second schedule starts from the first run's trained weights, and refuses to start
    without them or from another shape; runs from scratch keep the keys they had before the field existed."""
    import torch

    from tools.train.demo_training import build
    from tools.train.demo_training.config import ModelShape, quick_config

    base = quick_config()
    longer = dataclasses.replace(base, name="longer", target_init="quick")
    monkeypatch.setitem(build.CONFIGS, "quick", quick_config)
    run_dir = tmp_path / f"longer-{longer.target_fingerprint()}"
    base_dir = tmp_path / f"quick-{base.target_fingerprint()}"
    with pytest.raises(SystemExit, match="build it first"):
        build.initial_target(run_dir, longer)
    weights = {"w": torch.arange(4.0)}
    base_dir.mkdir()
    torch.save({"model": weights, "state": {"step": base.target_schedule.steps}}, base_dir / "target.ckpt")
    assert torch.equal(build.initial_target(run_dir, longer)["w"], weights["w"])
    (base_dir / "tokenizer.json").write_text("the base run's tokenizer")
    build.share_init_data(run_dir, longer)  # the same token ids as the weights it starts from
    assert (run_dir / "tokenizer.json").read_text() == "the base run's tokenizer"
    assert build.initial_target(run_dir, base) is None  # no target_init: from scratch
    wider = dataclasses.replace(longer, target=ModelShape(hidden_size=96, num_layers=3, num_heads=2,
                                                          intermediate_size=128))
    with pytest.raises(SystemExit, match="another shape"):
        build.initial_target(run_dir, wider)


def test_v3_long_continues_v3s_target_and_is_keyed_apart():
    from tools.train.demo_training.config import select_config

    v3, longer = select_config("v3", quick=False), select_config("v3-long", quick=False)
    assert longer.target_init == "v3" and longer.target == v3.target and longer.vocab_size == v3.vocab_size
    assert longer.target_fingerprint() != v3.target_fingerprint()
    assert v3.target_fingerprint() == "07dab4df91"  # the key v3 was built under, before target_init existed


def test_the_targets_own_text_resumes_where_it_stopped_and_starts_from_corpus_prefixes(tiny_llama, tmp_path,
                                                                                       monkeypatch):
    """`generated_blocks`: two sequences of prompt + continuation per block, the prompts the starts of corpus
    blocks; killed after its first chunk, a rerun writes exactly what an uninterrupted run writes."""
    import torch

    from tools.train.demo_training import generation
    from tools.train.demo_training.data import spread_blocks
    from tools.train.head_training.data import load_target

    target, _ = load_target(tiny_llama[0])
    corpus = torch.randint(1, 300, (300, 8), generator=torch.Generator().manual_seed(0))  # (S, T)
    count = 128  # two chunks of 64 blocks, each half greedy, half sampled
    whole = generation.generated_blocks(target, corpus, count, seed=3, path=tmp_path / "whole.pt")
    assert whole.shape == (count, 8)
    sequences = whole.reshape(-1, 4)  # (2 count, P + C), P = 1
    assert torch.equal(sequences[:, :1], spread_blocks(corpus, 2 * count)[:, :1])

    real = generation.continuations
    calls: list[int] = []

    def killed_after_one_chunk(*args, **kwargs):
        if calls:
            raise Killed
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(generation, "continuations", killed_after_one_chunk)
    with pytest.raises(Killed):
        generation.generated_blocks(target, corpus, count, seed=3, path=tmp_path / "resumed.pt")
    monkeypatch.setattr(generation, "continuations", real)
    assert torch.equal(generation.generated_blocks(target, corpus, count, seed=3, path=tmp_path / "resumed.pt"),
                       whole)


@pytest.mark.parametrize("share", [0.0, 0.5, 0.75])
def test_the_drafts_batches_hold_the_targets_own_text_at_its_share(tmp_path, monkeypatch, share):
    import torch

    from tools.train.demo_training import build
    from tools.train.demo_training.config import quick_config
    from tools.train.demo_training.data import PackedCorpus

    config = dataclasses.replace(quick_config(), draft_generated_blocks=50 if share else 0,
                                 draft_generated_share=share, suggested_repetition_penalty=1.2)
    packed = PackedCorpus(train=torch.zeros(1000, 8, dtype=torch.long))
    penalties = []

    def written(target, corpus, count, seed, path, penalty):
        penalties.append(penalty)
        return torch.ones(count, 8, dtype=torch.long)

    monkeypatch.setattr(build, "generated_blocks", written)
    blocks = build.distillation_blocks(tmp_path, packed, config, teacher=None)
    generated = blocks[:, 0].float().mean().item()
    assert generated == pytest.approx(share, abs=0.02) and len(blocks) >= len(packed.train)
    assert penalties == ([1.2] if share else [])  # written as the window decodes the family


def test_v3s_draft_learns_from_the_targets_own_text_and_the_targets_keep_their_keys():
    from tools.train.demo_training.config import select_config

    v3, longer = select_config("v3", quick=False), select_config("v3-long", quick=False)
    assert v3.draft_generated_blocks > 0 and 0 < v3.draft_generated_share < 1
    assert longer.draft_generated_blocks == v3.draft_generated_blocks
    # the keys their targets were trained under, before the draft's data changed
    assert (v3.target_fingerprint(), longer.target_fingerprint()) == ("07dab4df91", "0fdf23d34c")
    # the suggested penalty shapes the draft's data, so it keys the draft, not the target
    other = dataclasses.replace(v3, suggested_repetition_penalty=1.0)
    assert other.target_fingerprint() == v3.target_fingerprint()
    assert other.draft_fingerprint() != v3.draft_fingerprint()


def test_repeated_ngrams_mark_every_later_occurrence():
    import torch

    from tools.train.demo_training.objectives import repeated_ngrams

    tokens = torch.tensor([[1, 2, 3, 1, 2, 3, 1, 4], [5, 6, 7, 8, 9, 5, 6, 0]])
    marked = repeated_ngrams(tokens, 2)
    assert marked.tolist() == [[False, False, False, True, True, True, True, False], [False] * 5 + [True, True, False]]
    assert repeated_ngrams(tokens, 4).tolist() == [[False, False, False, True, True, True, True, False], [False] * 8]
    assert not repeated_ngrams(tokens, 5).any()


def test_unlikelihood_steps_lower_the_probability_of_the_targets_own_repeats(tiny_llama):
    """The model's greedy continuations loop (a random tiny model does at once); a few steps on their
    unlikelihood lower the probability of the repeated tokens."""
    import torch

    from tools.train.demo_training.config import Unlikelihood
    from tools.train.demo_training.generation import continue_rows
    from tools.train.demo_training.objectives import repeated_ngrams, unlikelihood_loss, unlikelihood_of_repeats
    from tools.train.head_training.data import load_target

    model, _ = load_target(tiny_llama[0])
    model.requires_grad_(True).train()
    prompts = torch.randint(1, 300, (4, 4), generator=torch.Generator().manual_seed(0))
    tokens = continue_rows(model, prompts, 24, None)  # (4, 28)
    assert repeated_ngrams(tokens[:, 4:], 2).any()
    assert torch.equal(unlikelihood_loss(model, prompts, Unlikelihood(1.0, ngram=2, prompt_tokens=4, new_tokens=24)),
                       unlikelihood_of_repeats(model, tokens, 4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        loss = unlikelihood_of_repeats(model, tokens, 4, 2)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[0] > 0 and all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses


def test_every_run_has_a_rebuild_command_and_v3_ul_fine_tunes_v3_long():
    from tools.train import demo_models as train_demo_models
    from tools.train.demo_training.config import CONFIGS, select_config
    from tools.train.demo_training.model_card import RUN_ARGUMENTS

    assert set(train_demo_models.RUNS) == set(CONFIGS)
    assert all(select_config(run, quick=False).name in RUN_ARGUMENTS for run in CONFIGS)
    fine_tuned, base = select_config("v3-ul", quick=False), select_config("v3-long", quick=False)
    assert fine_tuned.target_init == "v3-long" and fine_tuned.unlikelihood is not None and base.unlikelihood is None
    assert fine_tuned.target == base.target and fine_tuned.target_fingerprint() != base.target_fingerprint()


def test_development_prompts_start_held_out_documents_evenly():
    from tools.train.demo_training.corpus import Document
    from tools.train.demo_training.dev_prompts import dev_prompts

    code = [Document(f"m{i}.py", "code", f'"""Doc."""\nimport os\n\ndef f{i}(x):\n    y = x\n    return y\n\nz = 1\n')
            for i in range(5)] + [Document("empty.py", "code", "x = 1\n")]
    words = " ".join(f"word{i}" for i in range(60))
    prose = [Document("short", "prose", "Too short.\n\n" + words), Document("none", "prose", "Too short.")]
    prompts = dev_prompts(code, prose, per_domain=3)
    assert [p["id"] for p in prompts] == ["code-m0.py", "code-m2.py", "code-m4.py", "prose-short"]
    assert prompts[0]["text"] == "def f0(x):\n    y = x\n    return y"  # ends before a newline
    prose_text = prompts[-1]["text"]
    assert len(prose_text) <= 120 and words.startswith(prose_text) and not prose_text.endswith(" ")


def test_the_card_says_the_drafts_text_was_written_under_the_penalty():
    from tools.train.demo_training.model_card import draft_data_text

    written = {"draft_generated_blocks": 1000, "draft_generated_share": 0.5}
    assert "penalty" not in draft_data_text(written)
    assert "repetition penalty, 1.2." in draft_data_text({**written, "suggested_repetition_penalty": 1.2})
    assert draft_data_text({"draft_generated_blocks": 0}) == ""
