"""Hand-written SQL, one statement per file: `<package>/sql/<name>.sql`.

Every app that runs its own SQL keeps it in one folder beside its modules (`tenants/sql/`,
`core/sql/`, `agents/runtime/sql/`, `agents/conversations/sql/`, `agents/demo/sql/`,
`approvals/sql/`, `memory/sql/`), and its modules load each statement once, at import:

    PURGE_EXPIRED_SQL = sql.load("memory", "purge_expired_facts")

so a statement costs a file read per process, never per call (the engine's per-step
statements included). A file may start with `--` comment lines saying what the statement
does and what it expects; they are dropped, and the server receives the statement alone.

`agents/runtime/engine/sql/` is not such a folder: it holds the definitions of the stored
functions `agents_claim_run` and `agents_persist_step`, one file per released version, which
migrations 0006 and 0007 install by path. The statements that call them live in
`agents/runtime/sql/`.

Files are found through the package (importlib.resources), not the working directory.
This module sits in `core`, the bottom layer, so every layer may use it.
"""

from __future__ import annotations

import functools
from importlib import resources


@functools.cache
def load(package: str, name: str) -> str:
    """The statement in `<package>/sql/<name>.sql` (its leading comment lines dropped).

    `package` is the dotted name of the app that owns the folder (e.g. "agents.runtime").
    A missing file raises FileNotFoundError naming the path that was looked for.
    """
    path = resources.files(package) / "sql" / f"{name}.sql"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no SQL statement {name!r} for {package!r}: {path} does not exist"
        ) from None
    lines = text.splitlines(keepends=True)
    start = 0
    while start < len(lines) and (not lines[start].strip() or lines[start].startswith("--")):
        start += 1
    statement = "".join(lines[start:])
    if not statement.strip():
        raise ValueError(f"{path} holds no statement")
    return statement
