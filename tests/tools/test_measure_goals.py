"""The loop metric and parse check of tools/measure/goals.py, and one tiny end-to-end run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.measure.goals import GOALS_HEADING, LOOP_THRESHOLD, goal_rows, loop_share, parses
from tools.train.demo_training.evaluation import closing

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_loops_of_any_short_period_cover_the_whole_window():
    assert loop_share([7] * 100) == 1.0  # "\n\n\n..."
    assert loop_share([1, 2] * 50) == 1.0  # "#\n#\n..."
    assert loop_share([3, 4, 5, 6, 7] * 20) == 1.0  # "of the number of the number ..."
    assert loop_share(list(range(20)) * 5) == 1.0  # a whole line repeated


def test_text_without_repeats_is_not_degenerate():
    assert loop_share(list(range(200))) == 0.0
    once_repeated = list(range(40)) + list(range(10, 14)) + list(range(100, 120))
    assert loop_share(once_repeated) == 8 / 64  # a 4-gram twice in the last 64 tokens
    assert loop_share(list(range(100)) + list(range(200, 230)) * 2) >= LOOP_THRESHOLD  # a 30-token line twice
    assert loop_share(list(range(100)) + list(range(200, 215)) * 2 + list(range(300, 334))) < LOOP_THRESHOLD
    assert loop_share([1, 2, 3]) == 0.0  # shorter than any counted n-gram


def test_a_code_continuation_parses_but_for_its_cut_off_last_line():
    assert parses("def f(x):", "\n    return x + 1\n\n\ndef g(y):\n    return f(")
    assert parses("class A:", "\n    def m(self):")  # an open block is allowed
    assert not parses("def f(x):", "\n    return x +\n    )\n    y = 2")


def test_tiny_families_side_by_side(tiny_llama, tmp_path):
    family, suggesting = tmp_path / "tiny", tmp_path / "suggesting"
    for folder in (family, suggesting):
        folder.mkdir()
        (folder / "target").symlink_to(tiny_llama[0])
        (folder / "draft").symlink_to(tiny_llama[1])
    (suggesting / "playground.json").write_text(json.dumps({"target": "target", "repetition_penalty": 1.3}))
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"prompts": [{"id": "c", "domain": "code", "text": "def add(a, b):"},
                                               {"id": "p", "domain": "prose", "text": "The quick brown"}]}))
    command = [sys.executable, "-m", "tools.measure.goals", "--family", f"a={family}", "--family", f"b={suggesting}",
               "--prompts", str(prompts), "--max-new-tokens", "12", "--repeats", "1", "--json", str(tmp_path / "o"),
               "--card", str(tmp_path / "CARD.md")]
    old_card = f"# Card\n\n## Sizes\n\nsmall\n\n{GOALS_HEADING}\n\nold figures\n\n## Reproduce\n\nrun it\n"
    (tmp_path / "CARD.md").write_text(old_card)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_PROGRESS_BARS="1")
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert process.returncode == 0, process.stderr[-3000:]
    report = json.loads((tmp_path / "o").read_text())
    assert set(report["families"]) == {"a", "b"}
    figures = report["families"]["a"]
    assert set(figures["all_prompts"]) == {"autoregressive", "draft-model"}  # no heads in the folder
    row = figures["all_prompts"]["draft-model"]
    assert row["accepted"] <= row["drafted"] and 1 <= row["tokens_per_pass"] <= 5
    assert row["alpha_tested"] >= row["acceptance_rate"]  # tested positions are a subset of the drafted ones
    assert figures["code_parses"].endswith("/1") and figures["continuations"]["c"]["tokens"] == 12
    card = (tmp_path / "CARD.md").read_text()
    assert "old figures" not in card and card.count(GOALS_HEADING) == 1  # replaced, not appended
    assert "## Sizes\n\nsmall" in card and card.rstrip().endswith("run it")  # the other sections untouched
    assert "**a**" in card and "**b**" in card and "| `draft-model` |" in card
    # each family runs as the window starts it: with the repetition controls its playground.json suggests
    assert report["settings"]["repetition"] == {"a": {"penalty": 1.0, "no_repeat_ngram": 0},
                                                "b": {"penalty": 1.3, "no_repeat_ngram": 0}}
    assert "no repetition control)" in card and "repetition penalty 1.3)" in card


def _family(loop_free: str, parses_: str, alphas: dict, speedups: dict, folder: Path) -> dict:
    clean = {name: {"alpha_tested": alphas.get(name), "acceptance_rate": 0.5, "speedup": speedups[name]}
             for name in speedups}
    return {"folder": str(folder), "prompts_free_of_loops": loop_free, "code_parses": parses_,
            "prompts_free_of_loops_only": clean}


def test_goals_are_met_only_at_their_bars(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"0" * 1000)
    met = goal_rows(_family("8/10", "2/3", {"draft-model": 0.75, "eagle": 0.85},
                            {"draft-model": 1.3, "eagle": 1.2, "medusa": 1.6}, tmp_path))
    assert all(ok for _goal, _measured, ok in met), met
    assert "1.60x (`medusa`)" in [measured for _g, measured, _ok in met]  # the best learned head counts
    missed = goal_rows(_family("7/10", "1/3", {"draft-model": 0.749}, {"draft-model": 1.29}, tmp_path))
    assert [ok for _goal, _measured, ok in missed] == [False, False, False, False, False, False, True]


@pytest.mark.parametrize(("text", "closed"), [
    ("def f(a, b):\n    return g(a, [b", "])"),
    ('def f():\n    """Return the (first', '"""'),
    ("x = 'it(s'  # a comment (open\ny = {1: (2", ")}"),
    ("s = '''a\nb'''\nt = \"c\\\"(\"", ""),
])
def test_closing_closes_what_the_cut_left_open(text, closed):
    assert closing(text) == closed


def test_code_cut_inside_a_docstring_or_a_call_still_parses_but_broken_code_does_not():
    assert parses("def f(a):\n", '    """Return a list of the items.\n\n    The optional argument')
    assert parses("x = compute(", "1, 2,\n    key=lambda item: item[0],")
    assert not parses("def f(a):\n", "    return a a\n    pass")
    assert not parses("def f(a):\n", "    return a)\n\ndef g():\n    return 1")


def test_penalty_flips_are_the_positions_the_penalty_moved(tiny_llama):
    from app.engine.loading import load_models
    from tools.measure.penalty_flips import measure

    models = load_models(str(tiny_llama[0]), str(tiny_llama[1]), device="cpu", dtype="float32")
    prompts = ["def add(a, b):", "The quick brown"]
    plain = measure(models, ["draft-model"], prompts, penalty=1.0, max_new=10)
    assert plain["positions"] == 20 and plain["flips"] == 0  # no penalty: the choice is always the plain argmax
    strong = measure(models, ["draft-model", "prompt-lookup"], prompts, penalty=3.0, max_new=10)
    assert strong["positions"] == 20 and strong["flips"] > 0
    for rates in strong["first_draft_accepted"].values():
        assert all(0.0 <= rate <= 1.0 for rate in rates.values())


def test_a_family_assembled_from_links_has_the_size_of_its_files(tmp_path):
    from tools.train.demo_training.evaluation import folder_megabytes

    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"\0" * 2_000_000)
    family = tmp_path / "family"
    family.mkdir()
    (family / "target").symlink_to(weights)
    (family / "playground.json").write_text("{}")
    assert folder_megabytes(family) == 2.0


def test_the_drafters_speed_table_reports_alpha_and_the_acceptance_rate_apart(tiny_llama):
    from app.engine.core.stats import Acceptance
    from app.engine.loading import load_models
    from tools.measure.drafters import render_section, speed

    models = load_models(str(tiny_llama[0]), str(tiny_llama[1]), device="cpu", dtype="float32")
    summary = speed(models, ("draft-model",), ["def add(a, b):", "The quick brown"], repeats=1, max_new=16)
    row = summary["draft-model"]
    assert 0 <= row["acceptance_rate"] <= row["alpha"] <= 1
    assert summary["autoregressive"]["alpha"] is None and Acceptance().alpha is None
    report = {"heads": {}, "hardware": "cpu", "agreement": {}, "anchors": 0, "prompts": 2, "max_new_tokens": 16,
              "repeats": 1, "speed": summary}
    card = render_section(report)
    assert "| drafter | alpha | acceptance rate |" in card
    assert f"| `draft-model` | {row['alpha']:.3f} | {row['acceptance_rate']:.3f} |" in card
