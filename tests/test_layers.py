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
    assert "app.engine.decoding.decoder" in modules  # the walk found the engine, so the check below means something
    check = ("import importlib, sys\n"
             f"for name in {modules!r}: importlib.import_module(name)\n"
             f"loaded = [m for m in {GUI_PACKAGES!r} if m in sys.modules]\n"
             "assert not loaded, loaded\n")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


# ---- the import graph: rooms in layers, no circle ---------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]

# The layers, lowest first: a module imports from its own layer or a lower one, never from a higher one. A module
# belongs to the longest prefix listed; a new module at the engine's root is part of its front door.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("plain data", ("app.engine.settings", "app.engine.events", "app.engine.errors", "app.engine.paths")),
    ("transformers' private API", ("app.engine.hf_compat",)),  # imports nothing of app: every room may use it
    ("hub downloads", ("app.engine.download",)),  # files and load errors, shared by model and drafter loaders
    ("core", ("app.engine.core",)),
    ("runtime", ("app.engine.runtime",)),
    ("drafters", ("app.engine.drafters",)),
    ("loading", ("app.engine.loading",)),
    ("decoding", ("app.engine.decoding",)),
    ("front door", ("app.engine",)),
    ("instruments and teaching", ("app.bench", "app.teaching")),
    ("application", ("app",)),
    ("shared tool options", ("tools", "tools.options")),
    ("training tools", ("tools.train",)),
    ("measuring tools", ("tools.measure", "tools.device_check", "tools.docs_screenshots")),
)


def layer_of(module: str) -> tuple[int, str]:
    """(rank, the prefix that placed it) of a module: the longest matching prefix in LAYERS."""
    matches = [(len(prefix), rank, prefix) for rank, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer: add it to LAYERS"
    _, rank, prefix = max(matches)
    return rank, prefix


def source_modules() -> dict[str, Path]:
    """Every module of app/ and tools/ by dotted name (a package by its own name, for its __init__.py)."""
    found = {}
    for top in ("app", "tools"):
        for path in (REPO / top).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project's modules a file imports, also inside functions and under TYPE_CHECKING: a type-level circle
    is still a circle for a reader."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:  # `from package import module` imports the module
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {target for target in targets if target in known and target != module}


def import_graph() -> dict[str, set[str]]:
    known = source_modules()
    return {module: imports_of(module, path, known) for module, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_circle_between_modules():
    graph = import_graph()
    assert "app.engine.decoding.decoder" in graph and graph["app.engine.decoding.decoder"]  # the scan sees imports
    assert circles(graph) == []


def test_the_rooms_import_each_other_without_a_circle():
    """A room is a prefix of LAYERS (a package such as app.engine.core, or one plain-data module)."""
    rooms: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        room = layer_of(module)[1]
        rooms.setdefault(room, set()).update(layer_of(target)[1] for target in targets)
        rooms[room].discard(room)
    assert {"app.engine.core", "app.engine.runtime", "app.engine.loading", "app.engine.drafters"} <= set(rooms)
    assert circles(rooms) == []


def test_no_module_imports_from_a_higher_layer():
    """The engine never reaches up into the window, core never into runtime or loading, drafters never into
    loading (they see the models through registry.Models), and the application never into tools."""
    upward = []
    for module, targets in import_graph().items():
        rank, _ = layer_of(module)
        for target in sorted(targets):
            target_rank, _ = layer_of(target)
            if target_rank > rank:
                upward.append(f"{module} ({LAYERS[rank][0]}) imports {target} ({LAYERS[target_rank][0]})")
    assert upward == [], "move the module to a room at or below its importers' layer:\n" + "\n".join(upward)


def test_the_layer_order_is_enforced_where_it_matters():
    """The rule above would pass vacuously if every module landed in one layer."""
    assert layer_of("app.engine.core.verify")[0] < layer_of("app.engine.runtime.cached_model")[0]
    assert layer_of("app.engine.runtime.cached_model")[0] < layer_of("app.engine.drafters.registry")[0]
    assert layer_of("app.engine.drafters.registry")[0] < layer_of("app.engine.loading.load")[0]
    assert layer_of("app.engine.loading.load")[0] < layer_of("app.engine.decoding.decoder")[0]
    assert layer_of("app.engine.decoding.decoder")[0] < layer_of("app.engine.engine")[0]
    assert layer_of("app.engine.engine")[0] < layer_of("app.bench.methods")[0] < layer_of("app.session")[0]
    assert layer_of("app.engine.settings")[0] < layer_of("app.engine.core.stats")[0]
    assert layer_of("app.cli")[0] < layer_of("tools.train.heads")[0] < layer_of("tools.measure.drafters")[0]


def test_no_module_edits_the_import_path():
    """Tools run as modules (`python -m tools.…` from the checkout), so none puts the checkout on sys.path itself:
    an edited path hides import mistakes that `python -m` would show."""
    edits = sorted(str(path.relative_to(REPO)) for path in source_modules().values()
                   if any(call in path.read_text(encoding="utf-8") for call in ("sys.path.insert", "sys.path.append")))
    assert edits == []
