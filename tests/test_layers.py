"""The layers are a rule, not a habit: the engine is a plain library, usable without any GUI toolkit."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import app.engine

GUI_PACKAGES = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "qtpy", "shiboken6")


def engine_modules() -> list[str]:
    return sorted(info.name for info in pkgutil.walk_packages(app.engine.__path__, prefix="app.engine."))


def imported_roots(path: Path) -> set[str]:
    """Top-level package of every import statement in a file, also those inside functions."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_no_engine_source_file_imports_a_gui_toolkit():
    engine_root = Path(next(iter(app.engine.__path__)))
    offenders = {str(path.relative_to(engine_root)): sorted(imported_roots(path) & set(GUI_PACKAGES))
                 for path in engine_root.rglob("*.py")}
    assert not {name: gui for name, gui in offenders.items() if gui}


def test_importing_every_engine_module_loads_no_gui_toolkit():
    """Also catches a toolkit pulled in indirectly, through a helper module outside the engine."""
    modules = engine_modules()
    assert "app.engine.decoder" in modules  # the walk found the engine, so the check below means something
    check = ("import importlib, sys\n"
             f"for name in {modules!r}: importlib.import_module(name)\n"
             f"loaded = [m for m in {GUI_PACKAGES!r} if m in sys.modules]\n"
             "assert not loaded, loaded\n")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
