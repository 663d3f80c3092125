"""Bad input gives a typed error with a message that says what to do; the CLI prints one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.decoder import SpeculativeDecoder
from app.engine.errors import ContextTooLongError, IncompatibleTokenizerError, ModelLoadError
from app.engine.loading import load_models
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
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE"):
        load_models("no-such-org/no-such-model-xyz")


def test_mismatched_tokenizer_is_refused(tiny_llama, tmp_path):
    other_tok = make_tokenizer(tmp_path / "tok", vocab_size=320, extra_text="zzzz yyyy xxxx")
    other = make_model(tmp_path / "other", "llama", other_tok, layers=1, hidden=32, seed=5)
    with pytest.raises(IncompatibleTokenizerError) as info:
        load_models(str(tiny_llama[0]), str(other))
    message = str(info.value)
    assert "384" in message and "320" in message and "first difference at id" in message


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
        assert len(lines) == 1 and lines[0].startswith("error:"), (args, result.stderr)


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
