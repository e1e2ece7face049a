"""The dependency direction holds: no import cycle among project modules (imports inside
functions included), and few imports inside functions, each with its reason beside it.

import-linter (`make lint`, .ci/run) checks the layer contracts in pyproject.toml; these tests
check what it does not: cycles within a layer, and function-local imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tenants", "core", "agents", "approvals", "memory", "config")
MAX_LOCAL_IMPORTS = 15


def _project_modules(graph: grimp.ImportGraph) -> set[str]:
    return {m for m in graph.modules if m.split(".")[0] in PACKAGES and ".migrations" not in m}


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    modules = _project_modules(graph)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & modules) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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
    return found


def local_imports() -> list[tuple[str, int, str, str]]:
    """(file, line, module, reason) of every project import inside a function; the reason is
    the comment on the line above the import (or on the import's own line)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            source = path.read_text()
            lines = source.splitlines()
            for fn in ast.walk(ast.parse(source)):
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(fn):
                    names = []
                    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        names = [node.module]
                    elif isinstance(node, ast.Import):
                        names = [alias.name for alias in node.names]
                    for name in names:
                        if name.split(".")[0] not in PACKAGES:
                            continue
                        line = lines[node.lineno - 1]
                        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                        reason = line.partition("#")[2].strip() or (
                            above[1:].strip() if above.startswith("#") else ""
                        )
                        found.append((str(path.relative_to(ROOT)), node.lineno, name, reason))
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    sys.path.insert(0, str(ROOT))
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def test_no_project_module_is_part_of_an_import_cycle(graph):
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    cyclic = grimp.ImportGraph()
    for module in ("agents", "agents.a", "agents.b", "agents.c"):
        cyclic.add_module(module)
    cyclic.add_import(importer="agents.a", imported="agents.b")
    cyclic.add_import(importer="agents.b", imported="agents.c")
    cyclic.add_import(importer="agents.c", imported="agents.a")
    assert _cycles(cyclic) == [["agents.a", "agents.b", "agents.c"]]


def test_imports_inside_functions_are_few_and_each_says_why():
    found = local_imports()
    print("\n".join(f"{f}:{line} {module}  # {reason}" for f, line, module, reason in found))
    assert len(found) <= MAX_LOCAL_IMPORTS
    assert [(f, line) for f, line, _, reason in found if not reason] == []


def test_the_layer_contracts_hold():
    result = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports")],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:]
