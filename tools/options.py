"""The options the tools share, defined once so that every tool spells and explains them alike."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_threads(parser: argparse.ArgumentParser, default: int = 1) -> None:
    """--threads: torch's CPU threads. One by default for measurements (figures that compare runs on a shared
    machine); training tools pass their own default."""
    parser.add_argument("--threads", type=int, default=default, help=f"torch CPU threads (default: {default})")


def add_docs_dir(parser: argparse.ArgumentParser) -> None:
    """--docs-dir: where the Python documentation the corpus reads is installed."""
    parser.add_argument("--docs-dir", type=Path, default=None,
                        help="installed Python HTML documentation (default: /usr/share/doc/pythonX.Y/html)")
