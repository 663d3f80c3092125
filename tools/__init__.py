"""Reproducible scripts, run as modules from the repository root: `python -m tools.train.…` rebuilds the demo
models and heads, `python -m tools.measure.…` measures; `tools/options.py` holds the options they share.

A package, so tests import these modules (`from tools.measure import soak`) instead of loading files by path.
"""
