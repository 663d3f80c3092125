"""The command line checks every argument and path before it loads anything, and says what is wrong in one line."""

from __future__ import annotations

import dataclasses
import re

import pytest

from app import cli

ONE_LINE_ERROR = re.compile(r"^spec-playground (run|bench|bench \w+|screenshot): error: .+ \(see --help\)$")


@pytest.fixture
def loader_forbidden(monkeypatch):
    """Any attempt to load models fails the test."""
    from app.engine import loading
    from app.engine.engine import LocalEngine

    def refuse(*args, **kwargs):
        raise AssertionError("the models were loaded before the arguments were checked")

    monkeypatch.setattr(loading, "load_models", refuse)
    monkeypatch.setattr(LocalEngine, "load", classmethod(refuse))


def bad_paths(tmp_path):
    (tmp_path / "weights.bin").write_text("not a folder")
    (tmp_path / "no-config").mkdir()
    (tmp_path / "no-heads").mkdir()
    (tmp_path / "bad.json").write_text("{not json")
    return {
        "missing": str(tmp_path / "missing"), "file": str(tmp_path / "weights.bin"),
        "no-config": str(tmp_path / "no-config"), "no-heads": str(tmp_path / "no-heads"),
        "bad-json": str(tmp_path / "bad.json"),
    }


RUN_CASES = {
    "k 0": ["--k", "0"],
    "k too large": ["--k", "65"],
    "k not a number": ["--k", "two"],
    "negative temperature": ["--verify", "sample", "--temperature", "-1"],
    "zero temperature": ["--temperature", "0"],
    "top-p above 1": ["--top-p", "2"],
    "top-p 0": ["--top-p", "0"],
    "negative top-k": ["--top-k", "-1"],
    "no new tokens": ["--max-new-tokens", "0"],
    "negative seed": ["--seed", "-1"],
    "negative ASD budget": ["--asd-budget", "-1"],
    "negative ASD cap": ["--asd-cap", "-1"],
    "exit layer 0": ["--exit-layer", "0"],
    "repetition penalty 0": ["--repetition-penalty", "0"],
    "negative repetition penalty": ["--repetition-penalty", "-1.2"],
    "infinite repetition penalty": ["--repetition-penalty", "inf"],
    "repetition penalty not a number": ["--repetition-penalty", "strong"],
    "negative no-repeat n-gram size": ["--no-repeat-ngram-size", "-1"],
    "fractional no-repeat n-gram size": ["--no-repeat-ngram-size", "2.5"],
    "unknown rule": ["--verify", "beam"],
    "tree budget 0": ["--tree", "0"],
    "tree budget too large": ["--tree", "1000"],
    "tree with ASD": ["--tree", "8", "--verify", "asd"],
    "tree with a drafter that cannot branch": ["--tree", "8", "--drafter", "mtp"],
    "drafter twice": ["--drafter", "prompt-lookup", "--drafter", "prompt-lookup"],
    "unknown cache": ["--cache", "paged"],
    "compiling on the dynamic cache": ["--cache", "dynamic", "--compile"],
    "unknown option": ["--bogus"],
    "unknown device": ["--device", "bogus"],
    "unknown dtype": ["--dtype", "float8"],
    "missing target folder": ["--target", "{missing}"],
    "target is a file": ["--target", "{file}"],
    "target folder without a model": ["--target", "{no-config}"],
    "missing draft folder": ["--draft-model", "{missing}"],
    "missing heads folder": ["--heads", "{missing}"],
    "heads folder without heads": ["--heads", "{no-heads}"],
}


def expand(args, paths):
    return [arg.format(**paths) if arg.startswith("{") else arg for arg in args]


def fails_in_one_line(capsys, argv) -> str:
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2, argv
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and ONE_LINE_ERROR.match(lines[0]), (argv, lines)
    return lines[0]


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_run_rejects_a_bad_argument_before_loading(loader_forbidden, capsys, tmp_path, case):
    fails_in_one_line(capsys, ["run", "--prompt", "def f():", *expand(RUN_CASES[case], bad_paths(tmp_path))])


@pytest.mark.parametrize("prompt", ["", "  \n\t", "bad \udcff byte"])
def test_run_rejects_an_empty_or_broken_prompt_before_loading(loader_forbidden, capsys, prompt):
    line = fails_in_one_line(capsys, ["run", "--prompt", prompt])
    assert "empty" in line or "not valid Unicode" in line


def test_run_without_a_prompt(loader_forbidden, capsys):
    assert "--prompt" in fails_in_one_line(capsys, ["run", "--k", "3"])


BENCH_CASES = {
    "k 0": ["methods", "--k", "0"],
    "no repeats": ["trees", "--repeats", "0"],
    "no threads": ["asd", "--threads", "0"],
    "repetition penalty 0": ["methods", "--repetition-penalty", "0"],
    "negative no-repeat n-gram size": ["methods", "--no-repeat-ngram-size", "-2"],
    "repetition controls in the ASD sweep": ["asd", "--no-repeat-ngram-size", "3"],
    "missing prompt set": ["methods", "--prompts", "{missing}"],
    "prompt set not JSON": ["trees", "--prompts", "{bad-json}"],
    "unknown cache": ["methods", "--cache", "paged"],
    "compiling on the dynamic cache": ["asd", "--cache", "dynamic", "--compile"],
    "missing target folder": ["methods", "--target", "{missing}"],
    "missing heads folder": ["trees", "--heads", "{missing}"],
    "no kind": [],
    "unknown kind": ["speed"],
    "an option of another kind": ["trees", "--gates", "0.5"],
}


@pytest.mark.parametrize("case", list(BENCH_CASES))
def test_bench_rejects_a_bad_argument_before_loading(loader_forbidden, capsys, tmp_path, case):
    fails_in_one_line(capsys, ["bench", *expand(BENCH_CASES[case], bad_paths(tmp_path))])


def test_bench_without_a_kind_names_the_kinds(loader_forbidden, capsys):
    line = fails_in_one_line(capsys, ["bench", "--quick"])
    assert line.startswith("spec-playground bench: error:") and "KIND" in line


def test_repetition_messages_say_what_is_allowed(loader_forbidden, capsys):
    line = fails_in_one_line(capsys, ["run", "--prompt", "def f():", "--repetition-penalty", "0"])
    assert "repetition penalty must be a number > 0, 1.0 meaning off" in line
    line = fails_in_one_line(capsys, ["run", "--prompt", "def f():", "--no-repeat-ngram-size", "-1"])
    assert "no-repeat n-gram size must be a whole number >= 0, 0 meaning off" in line


def test_repetition_options_reach_the_settings():
    from app.engine.settings import RepetitionSettings

    args = cli.build_parser().parse_args(["run", "--prompt", "x", "--repetition-penalty", "1.3",
                                          "--no-repeat-ngram-size", "3"])
    assert cli.settings_from_args(args).repetition == RepetitionSettings(1.3, 3)
    args = cli.build_parser().parse_args(["run", "--prompt", "x"])
    assert not cli.settings_from_args(args).repetition.active  # off until models say otherwise


def test_repetition_options_left_out_take_what_the_models_suggest():

    from app.engine.settings import RepetitionSettings
    from tests.widgets.fakes import FAKE_SUMMARY

    summary = dataclasses.replace(FAKE_SUMMARY, suggested_repetition=RepetitionSettings(1.2, 0))
    parse = cli.build_parser().parse_args
    assert cli.settings_from_args(parse(["run", "--prompt", "x"]), summary).repetition == RepetitionSettings(1.2, 0)
    given = parse(["run", "--prompt", "x", "--repetition-penalty", "1", "--no-repeat-ngram-size", "5"])
    assert cli.settings_from_args(given, summary).repetition == RepetitionSettings(1.0, 5)
    assert cli.settings_from_args(parse(["run", "--prompt", "x"]), FAKE_SUMMARY).repetition == RepetitionSettings()


def test_screenshot_rejects_a_missing_folder_before_opening_anything(capsys, tmp_path):
    fails_in_one_line(capsys, ["screenshot", str(tmp_path / "shot.png"), "--target", str(tmp_path / "missing")])


@pytest.mark.parametrize("target", [None, "some-org/some-model", "bare-name"])
def test_good_arguments_and_hub_ids_reach_the_loader(loader_forbidden, target):
    """The other side: valid arguments (a hub id included) are not refused, they go on to load."""
    argv = ["run", "--prompt", "def f():", "--k", "3", "--verify", "sample", "--top-p", "0.9",
            "--repetition-penalty", "1.2", "--no-repeat-ngram-size", "3"]
    with pytest.raises(AssertionError, match="loaded"):
        cli.main(argv + (["--target", target] if target else []))


def help_entries(command: str) -> dict[str, str]:
    """Each option of `command --help` with its help text, continuation lines joined."""
    entries: dict[str, str] = {}
    current = None
    for line in cli.build_parser().commands[command].format_help().splitlines():
        if line.startswith("  -"):
            current = line.split()[0].rstrip(",")
            entries[current] = line
        elif current and line.startswith("    "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return entries


@pytest.mark.parametrize("command", ["run", "bench methods"])
def test_every_option_says_its_default(command):
    entries = help_entries(command)
    options = [a for a in cli.build_parser().commands[command]._actions if a.option_strings]  # noqa: SLF001
    assert len(entries) == len(options) >= 10
    for option, text in entries.items():
        if option in ("-h", "--help"):
            continue
        assert "default" in text or "(required)" in text, text
    assert "(default: 4)" in entries["--k"]
    unset = "(default: what the models suggest" if command == "run" else "(default: off)"
    assert unset in entries["--repetition-penalty"] and unset in entries["--no-repeat-ngram-size"]


def test_a_tree_with_a_chain_only_drafter_names_the_drafters_that_branch(loader_forbidden, capsys):
    from app.engine.drafters.registry import BRANCHING_DRAFTERS

    line = fails_in_one_line(capsys, ["run", "--prompt", "def f():", "--tree", "8", "--drafter", "dflash"])
    assert "dflash cannot draft a tree" in line and all(name in line for name in BRANCHING_DRAFTERS)


@pytest.mark.parametrize("command", ["run", "bench"])
def test_compiling_on_the_dynamic_cache_says_what_to_do(loader_forbidden, capsys, command):
    argv = [command, *(["--prompt", "def f():"] if command == "run" else ["methods"]), "--cache", "dynamic",
            "--compile"]
    assert "compiling needs the static cache" in fails_in_one_line(capsys, argv)


@pytest.mark.parametrize(("options", "expected"), [
    ([], dict(cache=None, compile=None)),  # the device's default, decided when loading
    (["--cache", "static"], dict(cache="static", compile=None)),
    (["--cache", "static", "--compile"], dict(cache="static", compile=True)),
    (["--compile"], dict(cache=None, compile=True)),  # implies the static cache
    (["--cache", "dynamic", "--no-compile"], dict(cache="dynamic", compile=False)),
    # published drafter checkpoints (app/engine/drafters/published/), by drafter
    (["--eagle", "org/e3", "--medusa", "org/m"], dict(drafters={"eagle": "org/e3", "medusa": "org/m"})),
])
def test_cache_and_compile_reach_the_loader(monkeypatch, options, expected):
    from app.engine.engine import LocalEngine

    asked = {}

    def capture(cls, request, *args, **kwargs):
        asked.update(request.to_dict())
        raise AssertionError("loaded")

    monkeypatch.setattr(LocalEngine, "load", classmethod(capture))
    with pytest.raises(AssertionError, match="loaded"):
        cli.main(["run", "--prompt", "def f():", *options])
    assert {key: asked[key] for key in expected} == expected


def test_the_execution_options_say_their_defaults():
    for command in ("run", "bench methods", "bench trees", "bench asd"):
        entries = help_entries(command)
        assert "(default: CUDA: static, elsewhere: dynamic)" in entries["--cache"]
        assert "(default: CUDA: on, elsewhere: off)" in entries["--compile"]
        assert "while the models load" in entries["--compile"]


def test_a_compiling_load_shows_its_steps_on_stderr(monkeypatch, capsys):
    from app.engine.engine import LocalEngine

    given = []

    def capture(cls, request, progress=None, *args, **kwargs):
        given.append(progress)
        raise AssertionError("loaded")

    monkeypatch.setattr(LocalEngine, "load", classmethod(capture))
    for options in ([], ["--compile"]):
        with pytest.raises(AssertionError, match="loaded"):
            cli.main(["run", "--prompt", "def f():", "--device", "cpu", *options])
    assert given[0] is None and isinstance(given[1], cli.LoadSteps)  # a load without compiles says nothing
    show = given[1]
    show(0.35, "compiling target: verify 8 rows (3/16)")
    for megabytes in range(5):  # a download's byte counts: once a second
        show(0.1, f"downloading org/model: {megabytes} of 5 MB")
    assert capsys.readouterr().err.splitlines() == ["[ 35%] compiling target: verify 8 rows (3/16)",
                                                     "[ 10%] downloading org/model: 0 of 5 MB"]


def test_a_familys_playground_json_suggests_its_repetition_controls(tmp_path, monkeypatch, tiny_llama):
    """The bundled family's manifest reaches the loaded models and their summary; other models suggest none."""
    import json

    from app.engine.engine import ModelsSummary
    from app.engine.loading import load as loading
    from app.engine.settings import RepetitionSettings

    (tmp_path / "playground.json").write_text(json.dumps(
        {"target": str(tiny_llama[0]), "draft": str(tiny_llama[1]), "repetition_penalty": 1.2}))
    monkeypatch.setattr(loading, "DEMO_DIR", tmp_path)
    bundled = loading.load_models(device="cpu", dtype="float32")
    assert ModelsSummary.of(bundled).suggested_repetition == RepetitionSettings(1.2, 0)
    named = loading.load_models(str(tiny_llama[0]), device="cpu", dtype="float32")
    assert named.suggested_repetition == RepetitionSettings()
    assert loading.manifest_repetition({"no_repeat_ngram_size": 3}) == RepetitionSettings(1.0, 3)


def test_run_refuses_a_too_long_prompt_before_loading_any_weights(monkeypatch, capsys):
    from app.engine.engine import LocalEngine

    def no_load(*_args, **_kwargs):
        raise AssertionError("the models were loaded for a prompt that cannot fit")

    monkeypatch.setattr(LocalEngine, "load", no_load)
    prompt = "def f(x):\n    return x + 1\n" * 200  # far more tokens than the bundled target's 512 positions
    assert cli.main(["run", "--prompt", prompt]) == 2
    error = capsys.readouterr().err
    assert "context holds 512" in error and "shorten the prompt" in error
    assert "ContextTooLongError" not in error and ".." not in error
