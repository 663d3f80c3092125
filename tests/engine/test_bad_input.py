"""Bad input gives a typed error with a message that says what to do; the CLI prints one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.decoding.decoder import SpeculativeDecoder
from app.engine.errors import ContextTooLongError, IncompatibleTokenizerError, ModelLoadError
from app.engine.loading import load as loading
from app.engine.loading import load_models
from app.engine.loading.load import same_tokenizer_files
from app.engine.settings import AsdSettings, DecodeSettings, DrafterOptions, SamplingSettings, SettingsError
from tests.tiny_models import make_model, make_tokenizer

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("build", [
    lambda: DecodeSettings(k=0),
    lambda: DecodeSettings(k=-3),
    lambda: DecodeSettings(k=10_000),
    lambda: DecodeSettings(k=2.5),
    lambda: DecodeSettings(verify="beam"),
    lambda: DecodeSettings(max_new_tokens=0),
    lambda: DecodeSettings(seed=-1),
    lambda: SamplingSettings(temperature=-1.0),
    lambda: SamplingSettings(temperature=float("nan")),
    lambda: SamplingSettings(top_p=0.0),
    lambda: SamplingSettings(top_p=1.5),
    lambda: SamplingSettings(top_k=-1),
    lambda: AsdSettings(budget=-1.0),
    lambda: AsdSettings(gate=-0.1),
    lambda: AsdSettings(cap=-1),
    lambda: DrafterOptions(lookup_min_ngram=4, lookup_max_ngram=2),
    lambda: DrafterOptions(layer_skip_layers=(1, 2)),
])
def test_invalid_settings_raise_settings_error(build):
    with pytest.raises(SettingsError) as info:
        build()
    assert str(info.value)


@pytest.mark.parametrize(("asd", "named"), [(AsdSettings(gate=5.0, cap=0), "M = 0"), (AsdSettings(gate=0.0), "g = 0"),
                                             (AsdSettings(budget=0.0), "B = 0")])
def test_asd_knobs_that_let_no_mismatch_through_are_named_as_strict_greedy(asd, named):
    """Allowed (§5.5: each reproduces strict greedy), but said, so g = 5 with M = 0 does not look broken."""
    reason = asd.strict_greedy_reason()
    assert reason is not None and named in reason and "strict greedy" in reason
    assert AsdSettings(gate=5.0).strict_greedy_reason() is None  # a loose gate lets mismatches through


def test_live_update_keeps_old_value_when_invalid():
    from app.engine.settings import LiveSettings

    live = LiveSettings(DecodeSettings(k=4))
    with pytest.raises(SettingsError):
        live.update(k=0)
    assert live.get().k == 4
    assert live.update(asd={"budget": 2.0}).asd.budget == 2.0


@pytest.mark.parametrize("prompt", ["", "   \n\t "])
def test_empty_prompt(tiny_llama, prompt):
    decoder = SpeculativeDecoder(load_models(str(tiny_llama[0])))
    with pytest.raises(SettingsError, match="empty"):
        decoder.generate(prompt, DecodeSettings(drafters=()))


def test_prompt_longer_than_the_context(tiny_llama):
    decoder = SpeculativeDecoder(load_models(str(tiny_llama[0])))
    with pytest.raises(ContextTooLongError, match="shorten"):
        decoder.generate("word " * 2000, DecodeSettings(drafters=()))


def test_unknown_drafter_is_reported_and_generation_continues(tiny_llama):
    decoder = SpeculativeDecoder(load_models(str(tiny_llama[0])))
    events = list(decoder.generate("hello", DecodeSettings(drafters=("draft-model",), max_new_tokens=5)))
    notices = [e for e in events if e.type == "notice"]
    assert notices and "draft-model" in notices[0].message
    assert events[-1].reason == "max_tokens" and len(events[-1].token_ids) == 5


def test_missing_folder(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_models(str(tmp_path / "nope"))


def test_folder_that_is_not_a_model(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ModelLoadError, match="not a loadable model folder"):
        load_models(str(tmp_path))


def test_unknown_hub_id_offline():
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE") as raised:
        load_models("no-such-org/no-such-model-xyz")
    message = str(raised.value)
    assert "not in the local model cache" in message and "Error" not in message  # plain words, no class names


def test_mismatched_tokenizer_is_refused(tiny_llama, tmp_path):
    other_tok = make_tokenizer(tmp_path / "tok", vocab_size=320, extra_text="zzzz yyyy xxxx")
    other = make_model(tmp_path / "other", "llama", other_tok, layers=1, hidden=32, seed=5)
    with pytest.raises(IncompatibleTokenizerError) as info:
        load_models(str(tiny_llama[0]), str(other))
    message = str(info.value)
    assert "384" in message and "320" in message and "first difference at id" in message


def test_a_familys_shared_tokenizer_is_read_once(tiny_llama, tmp_path, monkeypatch):
    target, draft = tiny_llama
    assert same_tokenizer_files(str(target), str(draft))
    other_tok = make_tokenizer(tmp_path / "tok", vocab_size=320, extra_text="zzzz yyyy xxxx")
    other = make_model(tmp_path / "other", "llama", other_tok, layers=1, hidden=32, seed=5)
    assert not same_tokenizer_files(str(target), str(other))
    assert not same_tokenizer_files(str(target), "some-org/some-model")  # a hub id: nothing to compare here
    read = []
    real_load_tokenizer = loading.load_tokenizer
    monkeypatch.setattr(loading, "load_tokenizer", lambda name: read.append(name) or real_load_tokenizer(name))
    assert load_models(str(target), str(draft), device="cpu").draft is not None
    assert read == [str(target)]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})


def test_cli_bad_input_prints_one_line_and_fails(tiny_llama, tmp_path):
    target, draft = map(str, tiny_llama)
    cases = [
        ["run", "--prompt", "", "--target", target],
        ["run", "--prompt", "x", "--target", target, "--k", "0"],
        ["run", "--prompt", "x", "--target", str(tmp_path / "missing")],
        ["run", "--prompt", "x", "--target", target, "--verify", "sample", "--top-p", "2"],
    ]
    for args in cases:
        result = cli(*args)
        assert result.returncode != 0, args
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("spec-playground run: error:"), (args, result.stderr)
        assert lines[0].endswith("(see --help)") and result.returncode == 2, lines


@pytest.mark.slow
def test_cli_jsonl_schema(tiny_llama):
    import json

    target, draft = map(str, tiny_llama)
    result = cli("run", "--prompt", "def add(a, b):", "--target", target, "--draft-model", draft, "--drafter",
                 "prompt-lookup", "--drafter", "draft-model", "--max-new-tokens", "12", "--jsonl")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[0]["type"] == "start" and events[-1]["type"] == "end"
    passes = [e for e in events if e["type"] == "pass"]
    assert passes
    for p in passes:
        assert {"index", "drafter", "k", "drafted", "appended", "ledger", "timing"} <= set(p)
        assert {"draft_ms", "verify_ms"} <= set(p["timing"]) and {"spent", "budget"} <= set(p["ledger"])
        for t in p["drafted"]:
            assert {"id", "text", "q", "p", "target_id", "regret", "outcome"} <= set(t)
    assert len(events[-1]["token_ids"]) == 12 and events[-1]["reason"] == "max_tokens"


# --- damaged files, devices, padded vocabularies, unusual text ------------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_damaged_weights_are_a_load_error_with_a_hint(tiny_llama, tmp_path, damage):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_llama[0], folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"not weights" * 50, "empty": b""}[damage])
    with pytest.raises(ModelLoadError) as info:
        load_models(str(folder))
    assert "damaged or incomplete" in str(info.value) and "again" in str(info.value)


@pytest.mark.parametrize("device", ["cuda", "cuda:7", "mps"])
def test_unavailable_device_is_named(tiny_llama, device):
    import torch

    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has the device")
    if device == "mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has the device")
    with pytest.raises(ModelLoadError, match="not available|does not exist"):
        load_models(str(tiny_llama[0]), device=device)


@pytest.fixture(scope="module")
def padded_pair(tiny_llama, tmp_path_factory):
    """The tiny target and a drafter with the same tokenizer but 64 padded vocabulary rows that would win argmax."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama[0])
    folder = make_model(tmp_path_factory.mktemp("padded") / "draft", "llama", tokenizer, layers=1, hidden=32,
                        seed=3, vocab_size=len(tokenizer) + 64)
    model = AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():  # padding rows = a real row x 50: unless masked, they dominate whenever it is positive
        head = model.get_output_embeddings().weight
        head[len(tokenizer):] = 50 * head[5]
    model.save_pretrained(folder)
    return str(tiny_llama[0]), str(folder), len(tokenizer)


def test_drafter_with_padded_vocabulary_is_masked_not_refused(padded_pair):
    from app.engine.events import PassEvent

    target, draft, vocab = padded_pair
    models = load_models(target, draft)
    assert models.draft.get_output_embeddings().weight.shape[0] == vocab + 64
    decoder = SpeculativeDecoder(models)
    prompt = "def add(a, b):\n    return a + b\n\ndef"
    plain = list(decoder.generate(prompt, DecodeSettings(drafters=(), max_new_tokens=24)))[-1]
    events = list(decoder.generate(prompt, DecodeSettings(drafters=("draft-model",), k=4, max_new_tokens=24)))
    drafted = [t.id for e in events if isinstance(e, PassEvent) for t in e.drafted]
    assert drafted and max(drafted) < vocab  # padding never proposed
    assert events[-1].reason == "max_tokens" and events[-1].token_ids == plain.token_ids  # greedy identity kept
    sampled = list(decoder.generate(prompt, DecodeSettings(drafters=("draft-model",), verify="sample",
                                                           max_new_tokens=16, seed=2)))[-1]
    assert sampled.reason == "max_tokens", sampled.error


UNUSUAL_PROMPTS = {
    "emoji": "emoji 🙂👩‍👩‍👧 and flags 🇫🇷:",
    "right-to-left": "مرحبا بالعالم שלום עולם",
    "combining": "e\u0301 n\u0303 a\u0308 Z\u0351\u0352",
    "control": "bell\x07 esc\x1b[31m nul\x00 del\x7f cr\r\n tab\t",
    "bidi-override": "\u202eevil\u202c \u200b\ufeff",
}


@pytest.mark.parametrize("name", list(UNUSUAL_PROMPTS))
def test_unusual_characters_in_the_prompt(tiny_llama, name):
    import json

    from app.engine.events import to_json_line

    prompt = UNUSUAL_PROMPTS[name]
    decoder = SpeculativeDecoder(load_models(str(tiny_llama[0])))
    events = list(decoder.generate(prompt, DecodeSettings(drafters=("prompt-lookup",), max_new_tokens=12)))
    assert events[-1].reason == "max_tokens", events[-1].error
    lines = [json.loads(to_json_line(e)) for e in events]
    assert lines[0]["prompt_text"] == prompt  # nothing lost on the way through JSON


def test_prompt_with_invalid_unicode_is_a_settings_error(tiny_llama):
    decoder = SpeculativeDecoder(load_models(str(tiny_llama[0])))
    with pytest.raises(SettingsError, match="not valid Unicode"):
        decoder.generate("bytes \udcff from a latin-1 file", DecodeSettings(drafters=()))


@pytest.mark.slow
def test_cli_unusual_prompt_on_an_ascii_console(tiny_llama):
    import json
    import os

    prompt = "".join(UNUSUAL_PROMPTS.values()).replace("\x00", "")  # argv cannot carry NUL
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONIOENCODING": "ascii"}
    base = [sys.executable, "-m", "app", "run", "--prompt", prompt, "--target", str(tiny_llama[0]),
            "--drafter", "prompt-lookup", "--max-new-tokens", "6"]
    jsonl = subprocess.run(base + ["--jsonl"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert jsonl.returncode == 0, jsonl.stderr
    events = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert events[0]["prompt_text"] == prompt and events[-1]["reason"] == "max_tokens"
    text = subprocess.run(base, cwd=ROOT, capture_output=True, timeout=300, env=env)
    assert text.returncode == 0, text.stderr
    bad = subprocess.run(base[:5] + [b"bad \xff byte"] + base[6:], cwd=ROOT, capture_output=True, timeout=300, env=env)
    lines = [line for line in bad.stderr.decode(errors="replace").splitlines() if line.strip()]
    assert bad.returncode == 2 and len(lines) == 1 and "not valid Unicode" in lines[0], bad.stderr
