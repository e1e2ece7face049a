"""Threads of agents that run elsewhere (LangGraph, through `AgentStateSaver` in sdk/python),
kept in the runtime's own tables so the same pages show them:

- a thread is a session (agent `langgraph`, titled with the thread id);
- each (thread, namespace) is a run, each checkpoint a Checkpoint of that run whose `state`
  is a readable preview, with the exact serialized checkpoint beside it (ExternalCheckpoint);
- channel values by version (ExternalBlob) and pending writes (ExternalWrite) as LangGraph
  keeps them. Bytes are opaque here: only the client deserializes them.

Everything runs in the caller's transaction and tenant scope (row-level security applies).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, transaction
from django.utils import timezone

from agents.runtime import extensions
from agents.runtime.definitions import Agent, register
from agents.runtime.errors import PermanentStepError
from agents.runtime.models import (
    AgentSession,
    ExternalBlob,
    ExternalCheckpoint,
    ExternalWrite,
    Run,
    RunStatus,
)
from agents.runtime.progress import publish
from tenants import rows, sql
from tenants.principal import Principal

AGENT = "langgraph"


def _driven_elsewhere(ctx: Any) -> Any:
    raise PermanentStepError("This run is driven by an external LangGraph process, not here.")


# Pages and the console look agents up by name; the engine never runs this one (its runs are
# never queued), and a console retry fails at once with the reason.
register(
    Agent(
        AGENT,
        version=1,
        first="external",
        description="LangGraph threads kept by AgentStateSaver (sdk/python); run elsewhere.",
        steps={"external": _driven_elsewhere},
        startable=False,
    )
)


def _session(principal: Principal, thread_id: str, *, create: bool) -> AgentSession | None:
    sessions = AgentSession.objects.for_tenant(principal.tenant).filter(
        agent=AGENT, title=thread_id
    )
    found = sessions.select_for_update().first()
    if found is not None or not create:
        return found
    try:
        with transaction.atomic():  # a savepoint: a concurrent first write may win the race
            return AgentSession.objects.create(
                tenant=principal.tenant, agent=AGENT, title=thread_id, user=None
            )
    except IntegrityError:
        return sessions.select_for_update().get()


FIND_RUN_SQL = (
    f"SELECT {rows.columns(Run, 'r')}, {rows.columns(AgentSession, 's')}"
    " FROM agents_run r JOIN agents_agentsession s ON s.id = r.session_id"
    " WHERE s.tenant_id = %(tenant)s AND s.agent = 'langgraph' AND s.title = %(thread)s"
    " AND r.tenant_id = s.tenant_id AND r.input -> 'checkpoint_ns' = to_jsonb(%(ns)s::text)"
    " ORDER BY r.id LIMIT 1 FOR UPDATE OF r, s"
)


def _run(principal: Principal, thread_id: str, ns: str, *, create: bool) -> Run | None:
    """The run of (thread, namespace), locked with its session; made on the first write when
    `create`."""
    # Every step after a thread's first: the run and its session found and locked in one
    # statement written by hand (a round trip fewer than through _session, and no query to
    # compile: what the ORM would do with .select_related("session").select_for_update()).
    params = {"tenant": principal.tenant.pk, "thread": thread_id, "ns": ns}
    row = _send_all([(FIND_RUN_SQL, params)], wanted={0})[0]
    if row is not None:
        found = rows.instance(Run, row[: rows.width(Run)])
        found.session = rows.instance(AgentSession, row[rows.width(Run) :])
        return found
    session = _session(principal, thread_id, create=create)
    if session is None:
        return None
    runs = Run.objects.for_tenant(principal.tenant).filter(session=session, input__checkpoint_ns=ns)
    run = runs.select_for_update().first()
    if run is None and create:
        now = timezone.now()
        run = Run.objects.create(
            tenant=principal.tenant,
            session=session,
            agent=AGENT,
            agent_version=1,
            current_step="external",
            state_schema_version=1,
            input={"thread_id": thread_id, "checkpoint_ns": ns},
            status=RunStatus.SUCCEEDED,
            created_by=principal.user,
            finished_at=now,
        )
    return run


PUT_SQL = sql.load("agents.runtime", "external_checkpoint_put")
WRITES_SQL = sql.load("agents.runtime", "external_writes_put")


# Nested in the caller's transaction without a savepoint (two round trips fewer per step):
# a failure rolls back the caller's whole transaction, which is what the door wants.
@transaction.atomic(savepoint=False)
def external_steps(*, principal: Principal, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply a batch of the saver's calls in order, in one transaction: checkpoints
    (`op: "put"`, the fields of external_checkpoint_put) and a task's pending writes (`op:
    "writes"`, the fields of external_writes_put). What a graph saves per step arrives as one
    batch; each (thread, namespace) is looked up and locked once per batch, and the batch's
    statements travel to the database together (one round trip)."""
    runs: dict[tuple[str, str], Run] = {}
    steps: list[tuple[Run, dict[str, Any]]] = []
    for op in ops:
        place = (op["thread_id"], op.get("checkpoint_ns", ""))
        if place not in runs:
            found = _run(principal, place[0], place[1], create=True)
            assert found is not None
            runs[place] = found
        steps.append((runs[place], op))
    if any(op.get("interrupts") for _, op in steps):
        # An interrupt may pause the run (the approval handler, in Python): one by one.
        for run, op in steps:
            fields = {k: v for k, v in op.items() if k != "op"}
            if op["op"] == "put":
                _checkpoint_put(principal, run, **fields)
            else:
                _writes_put(principal, run, **fields)
    else:
        _together(principal, steps)
    return [
        {"checkpoint_id": op["checkpoint_id"], "run_id": str(run.pk)}
        for run, op in steps
        if op["op"] == "put"
    ]


def _together(principal: Principal, steps: list[tuple[Run, dict[str, Any]]]) -> None:
    """The batch's statements sent together (one round trip); each checkpoint's row read back
    in order."""
    statements: list[tuple[str, dict[str, Any]]] = []
    puts: list[tuple[Run, str, int]] = []  # run, step, index of the statement
    for run, op in steps:
        fields = {k: v for k, v in op.items() if k != "op"}
        if op["op"] == "put":
            given = _put_params(principal, run, **fields)
            puts.append((run, given["step"], len(statements)))
            statements.append((PUT_SQL, given))
        elif (found := _writes_params(principal, run, **fields)) is not None:
            statements.append((WRITES_SQL, found))
    rows = _send_all(statements, wanted={index for _, _, index in puts})
    for run, step, index in puts:
        _after_put(run, step, rows[index])


def _send_all(
    statements: list[tuple[str, dict[str, Any]]], *, wanted: set[int]
) -> dict[int, tuple | None]:
    """With AGENTSTATE_PREPARED_STATEMENTS (as the engine's persist, engine/store.py): each
    statement prepared (parsed and planned once per connection) and all of them pipelined.
    Without: their text in one simple-protocol execute. Either way one round trip; the first
    row of each statement in `wanted`."""
    if not statements:
        return {}
    found: dict[int, tuple | None] = {}
    if not settings.AGENTSTATE_PREPARED_STATEMENTS:
        texts, params = [], {}
        for i, (text, given) in enumerate(statements):
            texts.append(re.sub(r"%\((\w+)\)s", rf"%(\1_{i})s", text.strip().rstrip(";")))
            params.update({f"{k}_{i}": v for k, v in given.items()})
        with connection.cursor() as cursor:
            cursor.execute(";\n".join(texts), params)
            for i in range(len(texts)):
                if i in wanted:
                    found[i] = cursor.fetchone()
                if i < len(texts) - 1:
                    cursor.nextset()
        return found
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    db.validate_no_broken_transaction()
    with db.wrap_database_errors:
        pgconn = db.connection
        with pgconn.pipeline():
            cursors = []
            for text, given in statements:
                cursor = psycopg.Cursor(pgconn)
                cursor.execute(text, given, prepare=True)
                cursors.append(cursor)
            for i, cursor in enumerate(cursors):
                if i in wanted:
                    found[i] = cursor.fetchone()
    return found


@transaction.atomic
def external_checkpoint_put(*, principal: Principal, **fields: Any) -> ExternalCheckpoint:
    """Save (or replace) one checkpoint of an external thread, with the channel values it
    introduced; the same id again replaces it, as LangGraph's savers do."""
    run = _run(principal, fields["thread_id"], fields["checkpoint_ns"], create=True)
    assert run is not None
    _checkpoint_put(principal, run, **fields)
    return (
        ExternalCheckpoint.objects.for_tenant(principal.tenant)
        .filter(
            thread_id=fields["thread_id"],
            checkpoint_ns=fields["checkpoint_ns"],
            checkpoint_id=fields["checkpoint_id"],
        )
        .get()
    )


def _checkpoint_put(
    principal: Principal,
    run: Run,
    *,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    parent_checkpoint_id: str,
    type: str,
    blob: bytes,
    metadata: dict[str, Any],
    channel_versions: dict[str, Any],
    blobs: list[dict[str, Any]],
    preview: dict[str, Any],
    step: str,
) -> None:
    """One statement (external_checkpoint_put.sql) on the locked run: values, checkpoint, its
    readable Checkpoint, the run's position and its step.finished event."""
    params = _put_params(
        principal, run, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id, parent_checkpoint_id=parent_checkpoint_id, type=type,
        blob=blob, metadata=metadata, channel_versions=channel_versions, blobs=blobs,
        preview=preview, step=step,
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(PUT_SQL, params)
        row = cursor.fetchone()
    _after_put(run, params["step"], row)


def _step_event(step: str) -> dict[str, Any]:
    return {
        "step": step,
        "attempt": 1,
        "status": RunStatus.SUCCEEDED,
        "next_step": "",
        "duration_ms": 0.0,
    }


def _put_params(
    principal: Principal,
    run: Run,
    *,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    parent_checkpoint_id: str,
    type: str,
    blob: bytes,
    metadata: dict[str, Any],
    channel_versions: dict[str, Any],
    blobs: list[dict[str, Any]],
    preview: dict[str, Any],
    step: str,
) -> dict[str, Any]:
    step = step[:100]
    return {
        "tenant": principal.tenant.pk,
        "run": run.pk,
        "thread": thread_id,
        "ns": checkpoint_ns,
        "checkpoint": checkpoint_id,
        "parent": parent_checkpoint_id,
        "type": type,
        "blob": blob,
        "metadata": json.dumps(metadata),
        "channel_versions": json.dumps(channel_versions),
        "preview": json.dumps(preview),
        "step": step,
        "event": json.dumps(_step_event(step)),
        "channels": [b["channel"] for b in blobs],
        "versions": [b["version"] for b in blobs],
        "types": [b["type"] for b in blobs],
        "blobs": [b["blob"] for b in blobs],
    }


def _after_put(run: Run, step: str, row: tuple | None) -> None:
    """What a saved checkpoint changes beyond its statement: the run as this process knows
    it, and its step.finished event, sent after commit. None: an id saved before, replaced
    in place, nothing new to tell."""
    if row is None:
        return
    run.step_seq, run.event_seq, run.version = row
    run.current_step = step
    publish(
        tenant_id=run.tenant_id, run_id=run.pk, kind="step.finished", seq=row[1],
        step_seq=row[0], **_step_event(step),
    )  # fmt: skip


@transaction.atomic
def external_writes_put(
    *,
    principal: Principal,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: list[dict[str, Any]],
    interrupts: list[dict[str, Any]] | None = None,
) -> None:
    """Save a task's pending writes. A regular write (idx >= 0) is kept as first written;
    the special ones (errors, interrupts: idx < 0) are replaced, as LangGraph's savers do.
    An interrupt whose value names an `action` pauses the run for a person's decision."""
    run = _run(principal, thread_id, checkpoint_ns, create=True)
    assert run is not None
    _writes_put(
        principal, run, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path, writes=writes,
        interrupts=interrupts,
    )  # fmt: skip


def _writes_put(
    principal: Principal,
    run: Run,
    *,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: list[dict[str, Any]],
    interrupts: list[dict[str, Any]] | None = None,
) -> None:
    for interrupt in interrupts or []:
        _pause(run, interrupt)
    params = _writes_params(
        principal, run, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path, writes=writes,
    )  # fmt: skip
    if params is not None:
        with connection.cursor() as cursor:
            cursor.execute(WRITES_SQL, params)


def _writes_params(
    principal: Principal,
    run: Run,
    *,
    thread_id: str,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    writes: list[dict[str, Any]],
    interrupts: list[dict[str, Any]] | None = None,
) -> dict[str, Any] | None:
    # One row per idx: the first of a regular write, the last of a special one.
    kept: dict[int, dict[str, Any]] = {}
    for write in writes:
        if write["idx"] < 0 or write["idx"] not in kept:
            kept[write["idx"]] = write
    if not kept:
        return None
    return {
        "tenant": principal.tenant.pk,
        "run": run.pk,
        "thread": thread_id,
        "ns": checkpoint_ns,
        "checkpoint": checkpoint_id,
        "task": task_id,
        "path": task_path,
        "idx": list(kept),
        "channels": [w["channel"] for w in kept.values()],
        "types": [w["type"] for w in kept.values()],
        "blobs": [w["blob"] for w in kept.values()],
    }


@transaction.atomic
def external_thread_delete(*, principal: Principal, thread_id: str) -> int:
    """Forget a thread: its session, runs, checkpoints, values and writes."""
    sessions = AgentSession.objects.for_tenant(principal.tenant).filter(
        agent=AGENT, title=thread_id
    )
    deleted, _ = sessions.delete()
    return deleted


def external_checkpoints(
    *,
    principal: Principal,
    thread_id: str | None,
    checkpoint_ns: str | None,
    checkpoint_id: str | None = None,
    before: str | None = None,
    metadata: dict[str, Any] | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Checkpoints of the tenant's external threads, newest first per (thread, namespace),
    each with the channel values it names and its pending writes."""
    rows = ExternalCheckpoint.objects.for_tenant(principal.tenant)
    if thread_id is not None:
        rows = rows.filter(thread_id=thread_id)
    if checkpoint_ns is not None:
        rows = rows.filter(checkpoint_ns=checkpoint_ns)
    if checkpoint_id:
        rows = rows.filter(checkpoint_id=checkpoint_id)
    if before:
        rows = rows.filter(checkpoint_id__lt=before)
    for key, value in (metadata or {}).items():
        rows = rows.filter(metadata__contains={key: value}, **{"metadata__has_key": key})
    rows = rows.order_by("thread_id", "checkpoint_ns", "-checkpoint_id")
    scalar = all(not isinstance(v, dict | list) for v in (metadata or {}).values())
    if limit is not None and scalar:
        # Containment is equality for scalar values: the limit can go to the database, so the
        # latest checkpoint of a long thread (get_tuple, every step) reads one row, not all.
        rows = rows[: max(limit, 0)]
    found = [r for r in rows if _equal_metadata(r.metadata, metadata)]
    if limit is not None:
        found = found[: max(limit, 0)]
    return _with_values(principal, found)


def _equal_metadata(stored: dict[str, Any], wanted: dict[str, Any] | None) -> bool:
    # Containment narrowed the rows in SQL; a filter means equality of each value.
    return all(stored.get(k) == v for k, v in (wanted or {}).items())


def _with_values(principal: Principal, found: list[ExternalCheckpoint]) -> list[dict[str, Any]]:
    """The checkpoints with the channel values they name and their pending writes, read in
    two queries per (thread, namespace) however many checkpoints there are."""
    blobs: dict[tuple, dict[tuple[str, str], ExternalBlob]] = {}
    writes: dict[tuple, list[ExternalWrite]] = {}
    for thread_id, ns in {(r.thread_id, r.checkpoint_ns) for r in found}:
        mine = [r for r in found if (r.thread_id, r.checkpoint_ns) == (thread_id, ns)]
        channels = {str(c) for r in mine for c in (r.channel_versions or {})}
        versions = {str(v) for r in mine for v in (r.channel_versions or {}).values()}
        blobs[(thread_id, ns)] = (
            {
                (b.channel, b.version): b
                for b in ExternalBlob.objects.for_tenant(principal.tenant).filter(
                    thread_id=thread_id,
                    checkpoint_ns=ns,
                    channel__in=channels,
                    version__in=versions,
                )
            }
            if channels
            else {}
        )
        for w in ExternalWrite.objects.for_tenant(principal.tenant).filter(
            thread_id=thread_id, checkpoint_ns=ns, checkpoint_id__in=[r.checkpoint_id for r in mine]
        ):
            writes.setdefault((thread_id, ns, w.checkpoint_id), []).append(w)
    return [
        _as_dict(
            row,
            [
                blob
                for channel, version in (row.channel_versions or {}).items()
                if (
                    blob := blobs[(row.thread_id, row.checkpoint_ns)].get(
                        (str(channel), str(version))
                    )
                )
            ],
            writes.get((row.thread_id, row.checkpoint_ns, row.checkpoint_id), []),
        )
        for row in found
    ]


def _as_dict(
    row: ExternalCheckpoint, values: list[ExternalBlob], writes: list[ExternalWrite]
) -> dict[str, Any]:
    return {
        "thread_id": row.thread_id,
        "checkpoint_ns": row.checkpoint_ns,
        "checkpoint_id": row.checkpoint_id,
        "parent_checkpoint_id": row.parent_checkpoint_id,
        "type": row.type,
        "blob": bytes(row.blob),
        "metadata": row.metadata,
        "values": [
            {"channel": b.channel, "version": b.version, "type": b.type, "blob": bytes(b.blob)}
            for b in values
        ],
        "writes": [
            {
                "task_id": w.task_id,
                "task_path": w.task_path,
                "idx": w.idx,
                "channel": w.channel,
                "type": w.type,
                "blob": bytes(w.blob),
            }
            for w in writes
        ],
        "run_id": str(row.run_id),
    }


def _pause(run: Run, interrupt: dict[str, Any]) -> None:
    """`interrupt({"action", "arguments", "reason", "amount"})` in a graph: an approval request
    in the inbox (through the registered pause handler, so the tenant's policies apply). The
    same interrupt again (a retried request) changes nothing."""
    value = interrupt.get("value")
    if not isinstance(value, dict) or not isinstance(value.get("action"), str):
        return  # an interrupt for something else: the graph's own business
    request_id = uuid.uuid5(uuid.NAMESPACE_URL, f"agentstate:{run.pk}:{interrupt.get('id')}")
    decided = (run.wake_payload or {}).get("decision") or {}
    if run.waiting_for == str(request_id) or decided.get("request_id") == str(request_id):
        return
    given = value.get("arguments")
    arguments: dict[str, Any] = given if isinstance(given, dict) else {}
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.WAITING_APPROVAL,
        waiting_for=str(request_id),
        wake_payload=None,
        version=run.version + 1,
    )
    extensions.pause_handler("approval")(
        extensions.Pause(
            id=request_id,
            tenant_id=run.tenant_id,
            run_id=run.pk,
            checkpoint_seq=run.step_seq,
            step=run.current_step,
            action=value["action"][:100],
            arguments=arguments,
            reason=str(value.get("reason") or "")[:2000],
            amount=value.get("amount") if isinstance(value.get("amount"), int | float) else None,
            due_at=None,
        )
    )
    publish(
        tenant_id=run.tenant_id,
        run_id=run.pk,
        kind="run.status",
        status=RunStatus.WAITING_APPROVAL,
    )


def external_decision(*, principal: Principal, thread_id: str, checkpoint_ns: str) -> dict:
    """Where the thread's run stands: waiting for a person, or the decision they made."""
    run = (
        Run.objects.for_tenant(principal.tenant)
        .filter(session__agent=AGENT, session__title=thread_id, input__checkpoint_ns=checkpoint_ns)
        .only("status", "waiting_for", "wake_payload")
        .first()
    )
    if run is None:
        return {"status": None, "decision": None}
    decision = (run.wake_payload or {}).get("decision")
    return {"status": run.status, "waiting_for": run.waiting_for, "decision": decision}
