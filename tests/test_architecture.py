"""The shape of the code: no import circle anywhere (a package and its own modules included, which
import-linter's sibling contract does not look at), and every import of a project module inside a function says
why it is lazy."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

REPO_ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("app", "jobs", "db", "core")


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (strongly connected, more than one module)."""
    names = sorted(set(edges) | {m for targets in edges.values() for m in targets})
    index = {m: i for i, m in enumerate(names)}
    rows = [index[a] for a, targets in edges.items() for _ in targets]
    cols = [index[b] for targets in edges.values() for b in targets]
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(names), len(names)))
    _, label = connected_components(graph, directed=True, connection="strong")
    groups: dict[int, list[str]] = {}
    for name, g in zip(names, label):
        groups.setdefault(int(g), []).append(name)
    return [sorted(g) for g in groups.values() if len(g) > 1]


def test_the_circle_finder_finds_a_circle_and_no_false_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []


def test_no_import_circles_between_project_modules():
    graph = grimp.build_graph(*LAYERS)  # every import statement, deferred ones included
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _circles(edges) == []


def _deferred_imports(path: Path) -> list[tuple[int, str, str]]:
    """(line, statement, its comment or the comment line above it) for each import of a project module made
    inside a function."""
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            else:
                continue
            if not any(m.split(".")[0] in LAYERS for m in modules):
                continue
            own = lines[node.end_lineno - 1].partition("#")[2]
            above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
            found.append((node.lineno, ast.unparse(node), own or (above[1:] if above.startswith("#") else "")))
    return found


def test_every_deferred_project_import_says_why():
    unexplained = [f"{path.relative_to(REPO_ROOT)}:{line}: {stmt}"
                   for layer in LAYERS for path in sorted((REPO_ROOT / layer).rglob("*.py"))
                   for line, stmt, why in _deferred_imports(path) if not why.strip()]
    assert unexplained == []


def test_the_deferred_import_check_sees_a_bare_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from core.metrics import retrieval_metrics\n\n\n"
                      "def g():\n    from core.lorentz import lift  # lazy: imports torch\n")
    found = _deferred_imports(module)
    assert [(line, bool(why)) for line, _, why in found] == [(2, False), (6, True)]
