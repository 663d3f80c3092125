"""Reproducible scripts: rebuilding the demo models and heads, measuring drafters, soak tests.

A package, so tests import these modules (`from tools import soak`) instead of loading files by path;
each script also runs as `python tools/NAME.py`.
"""
