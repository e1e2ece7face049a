"""The LangGraph steps door's common step in one statement: `agentstate_langgraph_step`
(sql/external_step_function.sql) checks the key, finds and locks the thread's run, checks
that this key drives it and that nothing but the graph bears on its status, and saves the
task's writes and the checkpoint, in autocommit: one round trip with its commit, where the
general path (external.external_steps in a transaction) takes three.

The function is made from the same statements the general path sends (external_writes_put and
external_checkpoint_put, their parameters renamed), installed after every migrate, so the two
paths cannot drift apart. Whatever it does not handle it answers without writing anything, and
the door takes the general path.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import psycopg
from django.conf import settings
from django.db import ProgrammingError as DjangoProgrammingError
from django.db import connection, connections, transaction

from agents.runtime import external, graph_runs
from agents.runtime.progress import publish
from core import sql

logger = logging.getLogger(__name__)

FUNCTION = "agentstate_langgraph_step"
CALL = f"SELECT * FROM {FUNCTION}({', '.join(['%s'] * 27)})"
READ_FUNCTION = "agentstate_langgraph_read"
READ_CALL = f"SELECT {READ_FUNCTION}(%s, %s, %s, %s, %s)"
_SHARED = {"tenant": "p_tenant", "run": "v_run", "thread": "p_thread", "ns": "p_ns"}
_missing_warned = False


def function_sql() -> str:
    """CREATE OR REPLACE FUNCTION, with the general path's two statements inside."""

    def inside(name: str, prefix: str) -> str:
        text = sql.load("agents.runtime", name).strip().rstrip(";")
        return re.sub(
            r"%\((\w+)\)s", lambda m: _SHARED.get(m.group(1), f"{prefix}_{m.group(1)}"), text
        )

    put = inside("external_checkpoint_put", "pp")
    answer = "\nSELECT * FROM ("
    if put.count(answer) != 1:
        raise ValueError("external_checkpoint_put.sql must end with one `SELECT * FROM (...)`")
    put = put.replace(answer, "\nSELECT * INTO v_s, v_e, v_v, v_shown, v_st, v_here FROM (")
    event = inside("record_event", "pe")
    if not event.endswith("RETURNING seq"):
        raise ValueError("record_event.sql must end with `RETURNING seq`")
    template = sql.load("agents.runtime", "external_step_function")
    return (
        _with_key_check(template)
        .replace("{writes}", inside("external_writes_put", "pw"))
        .replace("{put}", put)
        .replace("{event}", event + " INTO v_status_seq")
    )


def read_function_sql() -> str:
    """CREATE OR REPLACE FUNCTION agentstate_langgraph_read, with the shared key check."""
    return _with_key_check(sql.load("agents.runtime", "external_read_function"))


def _with_key_check(template: str) -> str:
    if "{key_active}" not in template:
        raise ValueError("a LangGraph door function must check its key with {key_active}")
    condition = "\n".join(
        line
        for line in sql.load("agents.runtime", "external_key_active").splitlines()
        if not line.lstrip().startswith("--")
    )
    return template.replace("{key_active}", "(" + condition.strip() + ")")


def install(**kwargs: Any) -> None:
    """post_migrate: (re)make the function on the database just migrated."""
    using = kwargs.get("using", "default")
    # Dropped first: CREATE OR REPLACE cannot change what a function returns. One transaction,
    # so a step meanwhile waits for it (or, missing it, takes the general path).
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}")
        cursor.execute(function_sql())
        cursor.execute(f"DROP FUNCTION IF EXISTS {READ_FUNCTION}")
        cursor.execute(read_function_sql())


def chunks(ops: list[dict[str, Any]]) -> list[list[dict[str, Any]]] | None:
    """The batch as the steps the function takes, in order (each: at most one task's plain
    writes, then at most one checkpoint that names the next nodes; no interrupt, resume value
    or error), all of one thread; None when it is not made of such steps."""
    found: list[list[dict[str, Any]]] = []
    for op in ops:
        if op["op"] == "writes" and (
            external.is_judged(op) or op.get("resumed") or op.get("errors") or not op["writes"]
        ):
            return None
        if op["op"] == "put" and op.get("next") is None:
            return None
        if op["op"] == "put" and found and [o["op"] for o in found[-1]] == ["writes"]:
            found[-1].append(op)
        else:
            found.append([op])
    places = {(op["thread_id"], op.get("checkpoint_ns", "")) for op in ops}
    return found if found and len(places) == 1 else None


def eligible(ops: list[dict[str, Any]]) -> bool:
    """A batch this path takes (see `chunks`)."""
    return chunks(ops) is not None


def step(
    *,
    tenant_id: Any,
    key_hash: str,
    driver: str,
    ops: list[dict[str, Any]],
    after: list[Callable[[], None]] | None = None,
) -> list[dict[str, Any]] | None:
    """Save the batch (see `chunks`): one step in one statement outside any transaction;
    several (a graph that ran ahead, durability "async"), one statement each, pipelined in
    one transaction. The answer's `saved`, or None when the general path must take it (nothing
    was written). The steps' live events (stored with them) are sent now, or left in `after`
    for the caller to send."""
    steps, calls = _calls(tenant_id, key_hash, driver, ops)
    rows = _call(CALL, calls[0]) if len(calls) == 1 else _call_together(calls)
    return _saved(tenant_id, steps, rows, after)


async def astep(
    conn: psycopg.AsyncConnection,
    *,
    tenant_id: Any,
    key_hash: str,
    driver: str,
    ops: list[dict[str, Any]],
    after: list[Callable[[], None]],
) -> list[dict[str, Any]] | None:
    """`step` on an async connection in autocommit (the door's own, on its event loop: no
    thread between the request and its statement). Database errors are raised."""
    steps, calls = _calls(tenant_id, key_hash, driver, ops)
    prepare = settings.AGENTSTATE_PREPARED_STATEMENTS
    rows: list[tuple] | tuple | None
    try:
        if len(calls) == 1:
            cursor = conn.cursor()
            await cursor.execute(CALL, calls[0], prepare=prepare)
            rows = await cursor.fetchone()
        else:
            try:
                async with conn.transaction():
                    async with conn.pipeline():
                        cursors = []
                        for params in calls:
                            cursor = conn.cursor()
                            await cursor.execute(CALL, params, prepare=prepare)
                            cursors.append(cursor)
                    rows = [await cursor.fetchone() for cursor in cursors]
                    if any(row is None or row[0] != "ok" for row in rows):
                        raise _NotAll
            except _NotAll:
                rows = None
    except psycopg.errors.UndefinedFunction:
        rows = _MISSING
    return _saved(tenant_id, steps, rows, after)


def _calls(
    tenant_id: Any, key_hash: str, driver: str, ops: list[dict[str, Any]]
) -> tuple[list[list[dict[str, Any]]], list[list[Any]]]:
    steps = chunks(ops)
    assert steps is not None
    return steps, [_params(tenant_id, key_hash, driver, chunk) for chunk in steps]


def _saved(
    tenant_id: Any,
    steps: list[list[dict[str, Any]]],
    rows: Any,
    after: list[Callable[[], None]] | None,
) -> list[dict[str, Any]] | None:
    """The answer's `saved` from the function's rows (one row, or one per step), the live
    events sent or left in `after`; None when the general path must take the batch."""
    global _missing_warned
    if rows is _MISSING:
        if not _missing_warned:
            _missing_warned = True
            logger.warning(
                "%s is not installed (run migrate): steps take the general path", FUNCTION
            )
        return None
    if rows is None:
        return None
    rows = [rows] if len(steps) == 1 else rows
    if any(row is None or row[0] != "ok" for row in rows):
        return None
    events: list[Callable[[], None]] = []
    saved = []
    for chunk, row in zip(steps, rows, strict=True):
        put = next((op for op in chunk if op["op"] == "put"), None)
        events += _events(tenant_id, row, put)
        if put is not None:
            saved.append({"checkpoint_id": put["checkpoint_id"], "run_id": str(row[1])})
    if after is None:
        for send in events:
            send()
    else:
        after.extend(events)
    return saved


def _params(tenant_id: Any, key_hash: str, driver: str, ops: list[dict[str, Any]]) -> list[Any]:
    writes = next((op for op in ops if op["op"] == "writes"), None)
    put = next((op for op in ops if op["op"] == "put"), None)
    first = writes or put
    assert first is not None
    params: list[Any] = [
        tenant_id,
        key_hash,
        driver,
        first["thread_id"],
        first.get("checkpoint_ns", ""),
    ]
    if writes is not None:
        kept = external.kept_writes(writes["writes"])
        params += [
            writes["checkpoint_id"], writes["task_id"], writes.get("task_path", ""),
            list(kept), [w["channel"] for w in kept.values()], [w["type"] for w in kept.values()],
            [w["blob"] for w in kept.values()],
        ]  # fmt: skip
    else:
        params += [None] * 7
    if put is not None:
        step_name = put.get("step", "")[:100]
        blobs = put.get("blobs", [])
        params += [
            put["checkpoint_id"], put.get("parent_checkpoint_id", ""), put["type"], put["blob"],
            json.dumps(put.get("metadata", {})),
            json.dumps(put.get("channel_versions", {})),
            json.dumps(put.get("preview", {})), step_name,
            graph_runs.names(put["next"] or []), True,
            json.dumps(external.step_event(step_name)),
            [b["channel"] for b in blobs], [b["version"] for b in blobs],
            [b["type"] for b in blobs], [b["blob"] for b in blobs],
        ]  # fmt: skip
    else:
        params += [None] * 15
    return params


def _events(tenant_id: Any, row: tuple, put: dict[str, Any] | None) -> list[Callable[[], None]]:
    # Both events are stored with the step: they are only sent.
    _, run_id, _was, step_seq, event_seq, _version, _shown, status, _judged, status_seq = row
    events: list[Callable[[], None]] = []
    if step_seq is not None and put is not None:
        events.append(partial(
            publish, tenant_id=tenant_id, run_id=run_id, kind="step.finished", seq=event_seq,
            step_seq=step_seq, committed=True, status=status,
            **external.step_event(put.get("step", "")[:100]),
        ))  # fmt: skip
    if status_seq is not None:
        events.append(partial(
            publish, tenant_id=tenant_id, run_id=run_id, kind="run.status", seq=status_seq,
            committed=True, status=status,
        ))  # fmt: skip
    return events


def read(
    *,
    tenant_id: Any,
    key_hash: str,
    thread_id: str,
    checkpoint_ns: str | None,
    checkpoint_id: str | None,
) -> str | None:
    """One checkpoint of the thread as the JSON text `GET langgraph/checkpoints` answers, in
    one statement outside any transaction; None when the key is not good for it (the door's
    general path then says why) or the function is not installed."""
    row = _call(READ_CALL, [tenant_id, key_hash, thread_id, checkpoint_ns, checkpoint_id])
    return None if row is None or row is _MISSING else row[0]


_MISSING = ("missing",)  # the function is not installed (a database not migrated since)


class _NotAll(Exception):
    """A step of a batch the function would not take: the transaction is rolled back."""


def _call_together(calls: list[list[Any]]) -> list[tuple] | tuple | None:
    """The function's row for each call, the calls pipelined in one transaction (two round
    trips: the calls, then the commit), committed only when every step was taken; None (all
    rolled back) otherwise, _MISSING without the function."""
    connection.ensure_connection()
    raw = connection.connection
    prepare = settings.AGENTSTATE_PREPARED_STATEMENTS
    try:
        with connection.wrap_database_errors, raw.transaction():
            with raw.pipeline():
                cursors = []
                for params in calls:
                    cursor = psycopg.Cursor(raw)
                    cursor.execute(CALL, params, prepare=prepare)
                    cursors.append(cursor)
            rows = [cursor.fetchone() for cursor in cursors]
            if any(row is None or row[0] != "ok" for row in rows):
                raise _NotAll
            return rows
    except _NotAll:
        return None
    except DjangoProgrammingError as exc:
        if isinstance(exc.__cause__, psycopg.errors.UndefinedFunction):
            return _MISSING
        raise


def _call(statement: str, params: list[Any]) -> tuple | None:
    """The statement's one row, in autocommit on the thread's connection (prepared, as the
    engine's statements are); _MISSING when its function does not exist."""
    connection.ensure_connection()
    try:
        with connection.wrap_database_errors:
            cursor = psycopg.Cursor(connection.connection)
            cursor.execute(statement, params, prepare=settings.AGENTSTATE_PREPARED_STATEMENTS)
            return cursor.fetchone()
    except DjangoProgrammingError as exc:
        if isinstance(exc.__cause__, psycopg.errors.UndefinedFunction):
            return _MISSING
        raise
