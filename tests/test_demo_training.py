"""Tests of the demo-model build script and of the committed demo models.

The quick build runs the whole pipeline (corpus, tokenizer, early-exit
target, distilled draft, export, evaluation, card) in miniature, in a
subprocess, exactly as a user would run it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO_ROOT / "tools" / "train_demo_models.py"
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
    command = [sys.executable, str(BUILD_SCRIPT), "--quick", "--out", str(out),
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
    assert playground["trained_with"] == "tools/train_demo_models.py"
    assert 1 <= playground["layer_skip_exit"] < 3  # quick target has 3 layers
    card = (out / "MODEL_CARD.md").read_text()
    assert "## Drafter measurements" in card and "TODO" in card


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
                    reason="demo models not built yet (python tools/train_demo_models.py)")
def test_committed_demo_models_load_offline():
    process = subprocess.run([sys.executable, "-c", COMMITTED_CHECK, str(COMMITTED_MODELS)],
                             env=offline_environment(), capture_output=True, text=True, timeout=120)
    assert process.returncode == 0, process.stderr[-3000:]
    assert process.stdout.strip().endswith("ok")


@pytest.mark.skipif(not COMMITTED_MODELS.exists(), reason="demo models not built yet")
def test_committed_demo_models_fit_size_budget():
    total = sum(p.stat().st_size for p in COMMITTED_MODELS.rglob("*") if p.is_file())
    assert total < 40e6
