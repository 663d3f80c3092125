"""The tools' tests are a tier of their own (`-m tools`): they build models, train and run whole measurements, so
the fast tier (`-m "not slow"`) leaves them out and CI runs them with everything else."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.tools)
            item.add_marker(pytest.mark.slow)
