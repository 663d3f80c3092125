"""The learned heads train, and the evaluation tools measure, on the corpus their target was trained on.

A family folder records its prose source (``playground.json``, or the corpus
section of ``MODEL_CARD.md`` for cards written before it did); ``train_heads.py``,
``evaluate_demo_models.py`` and ``measure_drafters.py`` default to it and take
``--prose-source`` to override it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.train.demo_training.corpus import CorpusSplit, Document
from tools.train.demo_training.model_card import PROSE_DESCRIPTIONS, recorded_prose_source, write_playground_json
from tools.train.head_training import data as head_data
from tools.train.head_training.run import full_run, quick_run

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN_MODULE = ["-m", "tools.train.heads"]  # run from the repository root
COMMITTED_MODELS = REPO_ROOT / "assets" / "models" / "demo"


def docs_installed() -> bool:
    from tools.train.demo_training.python_docs import default_docs_dir

    return (default_docs_dir() / "index.html").is_file()


def family(tmp_path: Path, manifest: dict | None = None, card: str | None = None) -> Path:
    (tmp_path / "target").mkdir(parents=True)
    if manifest is not None:
        (tmp_path / "playground.json").write_text(json.dumps(manifest))
    if card is not None:
        (tmp_path / "MODEL_CARD.md").write_text(card)
    return tmp_path / "target"


def docs_card() -> str:
    prose = PROSE_DESCRIPTIONS["docs"].format(weighting="not upweighted", docs_version="3.11.2")
    return f"# Card\n\n## Corpus and licence\n\n- code: every `*.py` file;\n{prose}\n"


def test_playground_json_records_the_prose_source(tmp_path):
    write_playground_json(tmp_path, 3, 1234, "docs")
    assert json.loads((tmp_path / "playground.json").read_text())["prose_source"] == "docs"
    assert recorded_prose_source(tmp_path) == recorded_prose_source(tmp_path / "target") == "docs"


def test_recorded_prose_source_falls_back_to_the_card_then_to_nothing(tmp_path):
    # A playground.json without the key (families built before it was recorded): the card decides.
    assert recorded_prose_source(family(tmp_path / "a", {"target": "target"}, docs_card())) == "docs"
    assert recorded_prose_source(family(tmp_path / "b", {"target": "target"})) is None
    assert recorded_prose_source(family(tmp_path / "c")) is None
    # playground.json wins over the card.
    assert recorded_prose_source(family(tmp_path / "d", {"prose_source": "pydoc"}, docs_card())) == "pydoc"


@pytest.mark.skipif(not (COMMITTED_MODELS / "MODEL_CARD.md").exists(), reason="demo models not built")
def test_committed_family_records_its_corpus():
    recorded = recorded_prose_source(COMMITTED_MODELS / "target")
    assert recorded in ("pydoc", "docs")


def test_heads_runs_weight_prose_as_the_families_were_trained():
    assert (quick_run(1, "pydoc").prose_repeats, quick_run(1, "docs").prose_repeats) == (2, 1)
    assert (full_run(1, "pydoc").prose_repeats, full_run(1, "docs").prose_repeats) == (2, 1)
    # The cached data of one corpus is never reused for the other.
    assert quick_run(1, "pydoc").data_fingerprint() != quick_run(1, "docs").data_fingerprint()
    with pytest.raises(ValueError, match="prose source"):
        quick_run(1, "wiki")


def test_heads_corpus_reads_the_chosen_prose_source(monkeypatch):
    calls = []

    def fake_split(max_code, max_prose, prose_source="pydoc", docs_dir=None):
        calls.append((max_code, max_prose, prose_source, docs_dir))
        return CorpusSplit(train=[Document("a.py", "code", "x = 1\n" * 200),
                                  Document("docs:tutorial/spam", "prose", "Spam and eggs. " * 200)],
                           heldout_code=[], heldout_prose=[])

    class Tokenizer:
        eos_token_id = 0

        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[1 + len(word) for word in text.split()] for text in texts]}

    monkeypatch.setattr(head_data, "split_documents", fake_split)
    run = quick_run(1, "docs")
    blocks = head_data.corpus_blocks(Tokenizer(), run, Path("/docs"))
    assert calls == [(run.max_code_files, run.max_prose_docs, "docs", Path("/docs"))]
    assert blocks.shape[1] == run.seq_len


def test_train_heads_defaults_to_the_targets_recorded_corpus(tmp_path):
    from tools.train.heads import parse_args, prose_source_of

    docs_target = family(tmp_path / "v2", {"prose_source": "docs"})
    bare_target = family(tmp_path / "bare")
    assert prose_source_of(parse_args(["--target", str(docs_target)]))[0] == "docs"
    assert prose_source_of(parse_args(["--target", str(docs_target), "--prose-source", "pydoc"]))[0] == "pydoc"
    assert prose_source_of(parse_args(["--target", str(bare_target)]))[0] == "pydoc"


def run_quick_heads(target: Path, root: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, *TRAIN_MODULE, "--quick", "--target", str(target), "--out", str(root / "heads"),
               "--cache-dir", str(root / "cache"), "--threads", "1", "--families", "medusa", *extra]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)


@pytest.mark.skipif(not docs_installed(), reason="the Python documentation is not installed (python3.X-doc)")
def test_quick_heads_train_on_the_python_documentation(tiny_llama, tmp_path):
    process = run_quick_heads(tiny_llama[0], tmp_path, "--prose-source", "docs")
    assert process.returncode == 0, process.stderr[-3000:]
    assert "corpus prose: docs (--prose-source)" in process.stderr
    training = json.loads((tmp_path / "heads" / "medusa" / "config.json").read_text())["training"]
    assert training["prose_source"] == "docs" and "Python documentation" in training["data"]


def test_quick_heads_without_the_documentation_fail_with_the_install_command(tiny_llama, tmp_path):
    process = run_quick_heads(tiny_llama[0], tmp_path, "--prose-source", "docs", "--docs-dir", str(tmp_path / "no"))
    assert process.returncode == 2, process.stderr[-3000:]
    assert "apt-get install python3" in process.stderr and "Traceback" not in process.stderr
    assert not (tmp_path / "heads").exists()
