"""The layers hold: engine (physics) <- catalog (YAML, DuckDB) <- planner (use cases, CLI) <-
app + pages + dashboard.py (the dashboard). Read from the source (every import, also the ones
inside functions), so a lazy import cannot hide a back edge or a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "catalog", "planner", "app")
# what each layer may import from the project (itself included) and which outside libraries it must not
ALLOWED = {
    "engine": {"engine"},
    "catalog": {"engine", "catalog"},
    "planner": {"engine", "catalog", "planner"},
    "app": {"engine", "catalog", "planner", "app"},
    "pages": {"engine", "catalog", "planner", "app"},
}
FORBIDDEN_LIBRARIES = {
    "engine": {"streamlit", "duckdb", "yaml", "altair"},
    "catalog": {"streamlit", "altair"},
    "planner": {"streamlit", "altair"},
}
# `python -m engine` must start the command line, which is a use case (planner/cli.py): the
# entry point module is the one file of engine/ allowed to reach up; nothing imports it.
ENTRY_POINTS = {"engine.__main__"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found[name] = path
    for path in sorted((ROOT / "pages").glob("*.py")):
        found[f"pages.{path.stem}"] = path
    return found


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement anywhere in the file (top level or lazy)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _project_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    edges = {}
    for name, path in modules.items():
        targets = set()
        for imported in _imports(path):
            parts = imported.split(".")
            for k in range(len(parts), 0, -1):  # the longest prefix that is a project module
                candidate = ".".join(parts[:k])
                # (a module's own package __init__ runs first whatever it imports: not an edge)
                if candidate in modules and candidate != name and candidate != name.split(".")[0]:
                    targets.add(candidate)
                    break
        edges[name] = targets
    return edges


def test_every_layer_imports_only_the_layers_below_it():
    modules = _modules()
    problems = []
    for name, path in modules.items():
        layer = name.split(".")[0]
        if name in ENTRY_POINTS:
            continue
        for imported in _imports(path):
            top = imported.split(".")[0]
            if top in ALLOWED and top not in ALLOWED[layer] or top == "pages" and layer != "pages":
                problems.append(f"{name} imports {imported}")
            if top in FORBIDDEN_LIBRARIES.get(layer, ()):
                problems.append(f"{name} imports {imported}")
    assert not problems, problems


def test_no_module_imports_the_entry_point():
    edges = _project_edges(_modules())
    assert not [a for a, targets in edges.items() if targets & ENTRY_POINTS]


def test_no_import_cycles():
    edges = _project_edges(_modules())
    cycles, state, stack = [], {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not cycles, [" -> ".join(c) for c in cycles]


def test_the_checker_sees_a_lazy_back_edge(tmp_path):
    # the scan must find an import inside a function body, or the layer test could not fail
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from catalog import default_catalog\n    return default_catalog\n")
    assert "catalog" in _imports(source)
