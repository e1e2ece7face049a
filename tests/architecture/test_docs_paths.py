"""The docs are the map: every file or folder of this repository they name in backticks
exists (a template by its name under templates/, a path relative to its own folder too)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "bench" / "README.md"])
TOP = ("agents", "memory", "approvals", "tenants", "core", "config", "sdk", "bench", "docs",
       "templates", "static", "tests", ".ci")  # fmt: skip
# `agents/runtime/engine/runner.py`, `core/charts/`, `templates/core/_filters.html`: a path
# from a top-level folder, with a file's extension or a folder's trailing slash.
NAMED = re.compile(r"`((?:{})/[\w./-]*?(?:\.\w+|/))`".format("|".join(map(re.escape, TOP))))


def named_paths(doc: Path) -> list[str]:
    return sorted(set(NAMED.findall(doc.read_text())))


def exists(path: str, doc: Path) -> bool:
    return any((base / path).exists() for base in (ROOT, ROOT / "templates", doc.parent))


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc):
    missing = [path for path in named_paths(doc) if not exists(path, doc)]
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_architecture_map_names_the_layers_it_describes():
    named = named_paths(ROOT / "docs" / "architecture.md")
    assert len(named) >= 3  # the check above is not vacuous for the map
