"""The engine's SQL: claim a run, and persist a step's outcome in one transaction.

Both are single statements sent in one round trip together with the tenant setting. Each
write also records its progress event (agents_runevent, numbered by agents_run.event_seq)
in the same statement, so the event is durable exactly when the write is. In
autocommit mode PostgreSQL runs such a multi-statement message as one implicit
transaction, so a plain step costs one round trip and one commit. Every write is fenced:
it matches only `version = <the version we claimed>` and `lease_owner = <us>`, so a worker
that lost its lease (and was superseded) writes nothing.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from agents.runtime.engine import wire
from agents.runtime.models import RunStatus
from core import sql

_SET_TENANT = sql.load("agents.runtime", "set_tenant")

# Both functions are defined in agents/runtime/engine/sql/ (installed by migrations): each sets
# the tenant and runs one statement, so a claim or a persist is one round trip, and
# PL/pgSQL keeps their plans per connection instead of planning every step.
CLAIM_SQL = sql.load("agents.runtime", "claim_run")
PERSIST_SQL = sql.load("agents.runtime", "persist_step")
# Fenced writes, sent by execute_fenced() after _SET_TENANT.
FAILURE_SQL = sql.load("agents.runtime", "fail_step")
CANCEL_SQL = sql.load("agents.runtime", "cancel_run")
FAILED_ATTEMPTS_SQL = sql.load("agents.runtime", "count_failed_attempts")
RUN_LOGS_SQL = sql.load("agents.runtime", "read_run_logs")


@dataclass
class Claim:
    run_id: Any
    tenant_id: str
    agent: str
    agent_version: int
    step: str
    step_seq: int
    version: int
    attempts: int
    input: dict
    wake_payload: dict | None
    session_id: Any
    state: dict
    state_version: int
    messages_upto: int
    cancel_requested: bool = False
    event_seq: int = 0  # number of the run's latest event (this claim's step.started)
    lost_at: Any = None  # the run was taken back from a worker lost then: this recovers it

    @cached_property
    def run_key(self) -> str:
        """The run's id as text, as the SQL parameters and the progress events carry it."""
        return str(self.run_id)


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def claim(*, tenant_id: str, run_id: Any, worker: str, lease_seconds: float) -> Claim | None:
    """Take the run's lease if it is runnable and free (or its lease expired)."""
    params: dict[str, Any] = {
        "tenant": str(tenant_id),
        "run": str(run_id),
        "worker": worker,
        "lease": lease_seconds,
    }
    row = _fetch_one(CLAIM_SQL, params)
    if row is None:
        return None
    (
        rid,
        agent,
        agent_version,
        step,
        seq,
        version,
        attempts,
        run_input,
        wake,
        session_id,
        run_state_version,
        cancel_requested,
        state,
        cp_version,
        upto,
        event_seq,
        lost_at,
    ) = row
    return Claim(
        run_id=rid,
        tenant_id=str(tenant_id),
        agent=agent,
        agent_version=agent_version,
        step=step,
        step_seq=seq,
        version=version,
        attempts=attempts,
        input=_loads(run_input) or {},
        wake_payload=_loads(wake),
        session_id=session_id,
        state=_loads(state) or {},
        state_version=cp_version if cp_version is not None else run_state_version,
        messages_upto=upto or 0,
        cancel_requested=cancel_requested,
        event_seq=event_seq,
        lost_at=lost_at,
    )


class Written(NamedTuple):
    status: str
    version: int
    event_seq: int  # the number of the event this write recorded (agents_runevent)


def persist(
    params: dict, db: BaseDatabaseWrapper | None = None, values: list[bytes | None] | None = None
) -> Written | None:
    """Persist a step (agents_persist_step); None means another worker superseded us. `db`:
    the connection the caller looked up once (a drive, for all its steps); `values`:
    `persist_values(params)`, if encoded already."""
    if db is not None and pipelined(db):  # the statement the pipelined step sends
        return persist_receive(persist_send(params, db, values))
    row = _fetch_one(PERSIST_SQL, params, db)
    return Written(row[0], row[1], row[2]) if row else None


_PERSIST = wire.Statement(PERSIST_SQL)


def pipelined(db: BaseDatabaseWrapper, prepared: bool | None = None) -> bool:
    """Whether a persist on `db` may be sent ahead of its answer (`persist_send`): through
    prepared statements (`prepared`: AGENTSTATE_PREPARED_STATEMENTS, if the caller read it
    already), and as its own transaction (not inside an atomic block)."""
    if prepared is None:
        prepared = settings.AGENTSTATE_PREPARED_STATEMENTS
    return prepared and db.autocommit and not db.in_atomic_block


def persist_values(params: dict) -> list[bytes | None]:
    """A persist's parameters as `persist_send` sends them (encoded ahead, while the server
    is busy with the step before)."""
    return _PERSIST.values(params)


def persist_send(
    params: dict, db: BaseDatabaseWrapper, values: list[bytes | None] | None = None
) -> wire.Sent:
    """Send a persist (as `persist`) without waiting: `persist_receive` reads its answer.
    `values`: `persist_values(params)`, if encoded already."""
    return wire.send(db, _PERSIST, values if values is not None else _PERSIST.values(params))


def persist_receive(sent: wire.Sent) -> Written | None:
    """The answer to `persist_send`: as `persist`'s (None: another worker superseded us)."""
    row = wire.receive(sent)
    if row is None:
        return None
    status, version, event_seq = row  # text, never NULL (agents_persist_step's columns)
    return Written(bytes(status or b"").decode(), int(version or 0), int(event_seq or 0))


def _fetch_one(sql: str, params: dict, db: BaseDatabaseWrapper | None = None) -> Any:
    """Run one of the statements every step sends. With AGENTSTATE_PREPARED_STATEMENTS it
    goes through a psycopg cursor with server-side binding and `prepare=True`: parsed and
    planned once per connection (Django's own cursors bind on the client and send the text
    each time). Errors are translated and marked on the connection exactly as through
    Django's cursor, so a broken connection is replaced."""
    if not settings.AGENTSTATE_PREPARED_STATEMENTS:
        with (db or connection).cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()
    if db is None:
        db = connections[DEFAULT_DB_ALIAS]  # once, rather than through the proxy at each use
    db.ensure_connection()
    db.validate_no_broken_transaction()
    with db.wrap_database_errors:
        pg_cursor = _cursor(db.connection)
        pg_cursor.execute(sql, params, prepare=True)
        return pg_cursor.fetchone()


_thread = threading.local()


def _cursor(pgconn: psycopg.Connection) -> psycopg.Cursor:
    """This thread's cursor on its current connection, made again when Django reconnects.
    A new cursor each step, with the connection reached through Django's proxy, cost 25–35 µs
    of the engine thread's CPU per step (about a fifth of it)."""
    cursor = getattr(_thread, "cursor", None)
    if cursor is None or cursor.connection is not pgconn or cursor.closed:
        cursor = _thread.cursor = psycopg.Cursor(pgconn)
    return cursor


def execute_fenced(sql: str, params: dict) -> Written | None:
    """Run a fenced write; None means another worker superseded us and nothing was written.

    Outside `transaction.atomic()` the statement is its own transaction; inside, it joins it.
    """
    row = execute_for_tenant(sql, params)
    return Written(row[0], row[1], row[2]) if row else None


def execute_for_tenant(sql: str, params: dict) -> Any:
    """Run `sql` in the tenant of params["tenant"]; its first row, or None."""
    with connection.cursor() as cursor:
        cursor.execute(_SET_TENANT + sql, params)
        cursor.nextset()
        return cursor.fetchone()


def dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, default=str)


TERMINAL = {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}


def failed_attempts(*, tenant_id: str, run_id: Any, seq: int) -> int:
    """How many attempts at the step that would write checkpoint `seq` failed (not those
    abandoned because a service went away: they record nothing)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _SET_TENANT + FAILED_ATTEMPTS_SQL,
            {"tenant": str(tenant_id), "run": str(run_id), "seq": seq},
        )
        cursor.nextset()
        return int(cursor.fetchone()[0])


def run_logs(*, tenant_id: str, run_id: Any, upto_seq: int) -> dict[str, list[Any]]:
    """The run's logs (`ctx.append`) as its checkpoints up to `upto_seq` stored them: each key's
    items, oldest first."""
    logs: dict[str, list[Any]] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            _SET_TENANT + RUN_LOGS_SQL,
            {"tenant": str(tenant_id), "run": str(run_id), "seq": upto_seq},
        )
        cursor.nextset()
        for (appended,) in cursor.fetchall():
            for key, items in (_loads(appended) or {}).items():
                logs.setdefault(key, []).extend(items)
    return logs
