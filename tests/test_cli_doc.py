"""docs/CLI.md is the command line's reference: it names every option of every subcommand, and no option that
does not exist."""

from __future__ import annotations

import re
from pathlib import Path

from app import cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "CLI.md"


def parser_options() -> set[str]:
    parsers = cli.build_parser().commands.values()
    return {option for parser in parsers for action in parser._actions  # noqa: SLF001 - argparse lists them nowhere else
            for option in action.option_strings if option.startswith("--") and option != "--help"}


def documented_options() -> set[str]:
    """The options named in the first column of the doc's tables (`--compile, --no-compile` names two)."""
    found = set()
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cell = re.match(r"^\| `([^`]+)` \|", line)
        if cell:
            found.update(re.findall(r"--[\w-]+", cell.group(1)))
    return found


def test_every_option_is_documented():
    assert "--asd-budget" in parser_options() and "--plot" in parser_options()  # the walk sees every subcommand
    assert parser_options() - documented_options() == set()


def test_nothing_documented_is_not_an_option():
    assert documented_options() - parser_options() == set()
