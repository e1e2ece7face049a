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
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, transaction
from django.utils import timezone

from agents.runtime import graph_runs
from agents.runtime.definitions import Agent, register
from agents.runtime.errors import (
    PermanentStepError,
    ThreadDrivenElsewhere,
    ThreadsNotForMembers,
)
from agents.runtime.models import (
    AgentSession,
    ExternalBlob,
    ExternalCheckpoint,
    ExternalWrite,
    Run,
    RunStatus,
)
from agents.runtime.progress import publish
from core import sql
from tenants import rows
from tenants.models import Scope
from tenants.principal import Principal

AGENT = graph_runs.AGENT  # "langgraph"


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
        summary=graph_runs.summary,  # graph_runs hook: the thread id names the run
    )
)


def driver_of(principal: Principal) -> str:
    """Who drives a thread this principal writes: its API key, or the signed-in person."""
    if principal.api_key is not None:
        return f"key:{principal.api_key.pk}"
    return f"user:{principal.user.pk}" if principal.user is not None else ""


def check_writer(principal: Principal) -> None:
    """Members (end users) own no LangGraph thread: they never write one."""
    if principal.api_key is None and principal.sees_only_own:
        raise ThreadsNotForMembers()


def _session(principal: Principal, thread_id: str, *, create: bool) -> AgentSession | None:
    """The thread's session, locked. A write (`create`) makes it on the first checkpoint and
    is refused when another key or person drives the thread: only the driver files its
    checkpoints and interrupts, so nobody else can add an approval request to it."""
    check_writer(principal)
    me = driver_of(principal)
    sessions = AgentSession.objects.for_tenant(principal.tenant).filter(
        agent=AGENT, title=thread_id
    )
    found = sessions.select_for_update().first()
    if found is not None:
        _check_driver(principal, found)
        return found
    if not create:
        return None
    try:
        with transaction.atomic():  # a savepoint: a concurrent first write may win the race
            made = AgentSession.objects.create(
                tenant=principal.tenant, agent=AGENT, title=thread_id, user=None, driver=me
            )
        made.made_now = True  # type: ignore[attr-defined]
        return made
    except IntegrityError:
        return _session(principal, thread_id, create=False)


def _check_driver(principal: Principal, session: AgentSession) -> None:
    """Only the thread's driver writes it; a thread kept before threads had drivers is
    adopted by its next writer."""
    me = driver_of(principal)
    if session.driver and session.driver != me:
        raise ThreadDrivenElsewhere()
    if not session.driver:
        AgentSession.objects.filter(pk=session.pk).update(driver=me)
        session.driver = me


FIND_RUN_SQL = (
    f"SELECT {rows.columns(Run, 'r')}, {rows.columns(AgentSession, 's')}"
    " FROM agents_run r JOIN agents_agentsession s ON s.id = r.session_id"
    " WHERE s.tenant_id = %(tenant)s AND s.agent = 'langgraph' AND s.title = %(thread)s"
    " AND r.tenant_id = s.tenant_id AND r.input -> 'checkpoint_ns' = to_jsonb(%(ns)s::text)"
    " ORDER BY r.id LIMIT 1 FOR UPDATE OF r, s"
)


# Whether a key is good, and FIND_RUN_SQL finding and locking nothing unless it is: sent along
# with the API key's lookup (tenants.api_auth.api_key_resolve) in its round trip (RunsAhead).
KEY_GOOD_SQL = (
    "SELECT EXISTS (SELECT 1 FROM tenants_apikey k"
    " WHERE k.tenant_id = %(tenant)s AND k.key_hash = %(key_hash)s"
    " AND k.revoked_at IS NULL AND k.user_id IS NULL"
    " AND (k.expires_at IS NULL OR k.expires_at > now()))"
)
FIND_RUN_FOR_KEY_SQL = FIND_RUN_SQL.replace(" ORDER BY", f" AND ({KEY_GOOD_SQL}) ORDER BY")


class RunsAhead:
    """The runs of a batch's threads looked up ahead, in the round trip of the API key's
    lookup (the steps door): `send` queues the statements in the connection's pipeline, `found`
    reads their rows once the key has proved good."""

    def __init__(self, ops: list[dict[str, Any]]) -> None:
        self.places = list(
            dict.fromkeys((op["thread_id"], op.get("checkpoint_ns", "")) for op in ops)
        )
        self._key: psycopg.Cursor | None = None
        self._cursors: list[psycopg.Cursor] = []
        self._found: dict[tuple[str, str], tuple | None] | None = None

    def send(self, tenant_id: Any, key_hash: str) -> None:
        pgconn = connection.connection
        prepare = settings.AGENTSTATE_PREPARED_STATEMENTS
        self._key = psycopg.Cursor(pgconn)
        self._key.execute(
            KEY_GOOD_SQL, {"tenant": tenant_id, "key_hash": key_hash}, prepare=prepare
        )
        for thread_id, ns in self.places:
            cursor = psycopg.Cursor(pgconn)
            params = {"tenant": tenant_id, "thread": thread_id, "ns": ns, "key_hash": key_hash}
            cursor.execute(
                FIND_RUN_FOR_KEY_SQL, params, prepare=settings.AGENTSTATE_PREPARED_STATEMENTS
            )
            self._cursors.append(cursor)

    def found(self) -> dict[tuple[str, str], tuple | None]:
        if self._found is None:
            self._found = {
                place: cursor.fetchone()
                for place, cursor in zip(self.places, self._cursors, strict=True)
            }
        return self._found

    def prove_key(self) -> bool:
        """Whether the key is an active, unexpired integration key now (its first statement
        asks; each run's finds and locks its run only for such a key)."""
        if self._key is None:
            return False
        row = self._key.fetchone()
        return bool(row and row[0])


def _run(
    principal: Principal,
    thread_id: str,
    ns: str,
    *,
    create: bool,
    ahead: dict[tuple[str, str], tuple | None] | None = None,
) -> Run | None:
    """The run of (thread, namespace), locked with its session; made on the first write when
    `create`. `ahead`: rows of FIND_RUN_SQL already fetched (RunsAhead)."""
    # Every step after a thread's first: the run and its session found and locked in one
    # statement written by hand (a round trip fewer than through _session, and no query to
    # compile: what the ORM would do with .select_related("session").select_for_update()).
    params = {"tenant": principal.tenant.pk, "thread": thread_id, "ns": ns}
    check_writer(principal)
    if ahead is not None and (thread_id, ns) in ahead:
        row = ahead[(thread_id, ns)]  # looked up with the key, which proved good
    else:
        row = _send_all([(FIND_RUN_SQL, params)], wanted={0})[0]
    if row is not None:
        found = rows.instance(Run, row[: rows.width(Run)])
        found.session = rows.instance(AgentSession, row[rows.width(Run) :])
        _check_driver(principal, found.session)
        return found
    session = _session(principal, thread_id, create=create)
    if session is None:
        return None
    run = None
    if not getattr(session, "made_now", False):  # a session made just now has no run yet
        runs = Run.objects.for_tenant(principal.tenant).filter(
            session=session, input__checkpoint_ns=ns
        )
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
def external_steps(
    *, principal: Principal, ops: list[dict[str, Any]], ahead: RunsAhead | None = None
) -> list[dict[str, Any]]:
    """Apply a batch of the saver's calls in order, in one transaction: checkpoints
    (`op: "put"`, the fields of external_checkpoint_put) and a task's pending writes (`op:
    "writes"`, the fields of external_writes_put). What a graph saves per step arrives as one
    batch; each (thread, namespace) is looked up and locked once per batch, and the batch's
    statements travel to the database together (one round trip). `ahead`: the runs already
    looked up with the API key."""
    check_writer(principal)
    found_ahead = ahead.found() if ahead is not None else None
    runs: dict[tuple[str, str], Run] = {}
    steps: list[tuple[Run, dict[str, Any]]] = []
    for op in ops:
        place = (op["thread_id"], op.get("checkpoint_ns", ""))
        if place not in runs:
            found = _run(principal, place[0], place[1], create=True, ahead=found_ahead)
            assert found is not None
            runs[place] = found
        steps.append((runs[place], op))
    if any(is_judged(op) for _, op in steps):
        # An interrupt, a resume value or an error moves the run (graph_runs, in Python):
        # one by one, in order.
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


def is_judged(op: dict[str, Any]) -> bool:
    """Whether graph_runs must see this op as it is applied: writes that interrupt, resume
    or fail the graph (plain writes change nothing of the run)."""
    if op["op"] != "writes":
        return False
    special = {graph_runs.INTERRUPT, graph_runs.RESUME, graph_runs.ERROR}
    return bool(op.get("interrupts")) or any(w["channel"] in special for w in op["writes"])


def _together(principal: Principal, steps: list[tuple[Run, dict[str, Any]]]) -> None:
    """The batch's statements sent together (one round trip); each checkpoint's row read back
    in order."""
    statements: list[tuple[str, dict[str, Any]]] = []
    puts: list[tuple[Run, dict[str, Any], int]] = []  # run, params, index of the statement
    for run, op in steps:
        fields = {k: v for k, v in op.items() if k != "op"}
        if op["op"] == "put":
            given = _put_params(principal, run, **fields)
            puts.append((run, given, len(statements)))
            statements.append((PUT_SQL, given))
        elif (found := _writes_params(principal, run, **fields)) is not None:
            statements.append((WRITES_SQL, found))
    rows = _send_all(statements, wanted={index for _, _, index in puts})
    for run, given, index in puts:
        _after_put(run, given, rows[index])


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


def _checkpoint_put(principal: Principal, run: Run, **fields: Any) -> None:
    """One statement (external_checkpoint_put.sql) on the locked run: values, checkpoint, its
    readable Checkpoint, the run's position and its step.finished event (the fields are
    `_put_params`')."""
    params = _put_params(principal, run, **fields)
    with connection.cursor() as cursor:
        cursor.execute(PUT_SQL, params)
        row = cursor.fetchone()
    _after_put(run, params, row)


def step_event(step: str) -> dict[str, Any]:
    """A graph step's step.finished event, but for the run's status after it (stored and
    sent with it, as the engine's say it: between two steps "running", which keeps the event
    off the tenant's feeds)."""
    return {
        "step": step,
        "attempt": 1,
        "next_step": "",
        "duration_ms": None,  # its node ran elsewhere: not timed here
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
    next: list[str] | None = None,
) -> dict[str, Any]:
    step = step[:100]
    return {
        "next": next,
        "on": graph_runs.names(next or []),
        # The run's status judged in the statement itself (graph_runs.checkpoint_saved does
        # the same in Python when an interrupt or an error may bear on it).
        "fast": next is not None and not run.error,
        "source": str(metadata.get("source", "")),
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
        "event": json.dumps(step_event(step)),
        "channels": [b["channel"] for b in blobs],
        "versions": [b["version"] for b in blobs],
        "types": [b["type"] for b in blobs],
        "blobs": [b["blob"] for b in blobs],
    }


def _after_put(run: Run, params: dict[str, Any], row: tuple | None) -> None:
    """What a saved checkpoint changes beyond its statement: the run as this process knows
    it, its step.finished event (sent after commit) for a new checkpoint, and where the run
    stands now (graph_runs: its status follows the graph)."""
    if row is None:
        return
    step_seq, event_seq, version, shown_id, status, judged = row
    replaced = step_seq is None  # an id saved before, replaced in place: no new step
    if not replaced:
        run.step_seq, run.event_seq, run.version = step_seq, event_seq, version
        run.current_step = params["step"]
        publish(
            tenant_id=run.tenant_id, run_id=run.pk, kind="step.finished", seq=event_seq,
            step_seq=step_seq, **{**step_event(params["step"]), "status": status},
        )  # fmt: skip
    if judged:  # the statement moved the run as graph_runs would have
        if status != run.status:
            run.status, run.waiting_for = status, ""
            publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.status", status=status)
        return
    # graph_runs hook: the run's status follows the graph.
    graph_runs.checkpoint_saved(
        run=run,
        checkpoint_ns=params["ns"],
        checkpoint_id=params["checkpoint"],
        shown_id=shown_id,
        next_nodes=params["next"],
        source=params["source"],
        replaced=replaced,
    )


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
    resumed: list[str] | None = None,
    errors: list[str] | None = None,
) -> None:
    """Save a task's pending writes. A regular write (idx >= 0) is kept as first written;
    the special ones (errors, interrupts: idx < 0) are replaced, as LangGraph's savers do.
    An interrupt whose value names an `action` pauses the run for a person's decision."""
    run = _run(principal, thread_id, checkpoint_ns, create=True)
    assert run is not None
    _writes_put(
        principal, run, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path, writes=writes,
        interrupts=interrupts, resumed=resumed, errors=errors,
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
    resumed: list[str] | None = None,
    errors: list[str] | None = None,
) -> None:
    params = _writes_params(
        principal, run, thread_id=thread_id, checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id, task_id=task_id, task_path=task_path, writes=writes,
    )  # fmt: skip
    if params is not None:
        with connection.cursor() as cursor:
            cursor.execute(WRITES_SQL, params)
    # graph_runs hook: an interrupt opens a request, a resume value or an error moves the run.
    graph_runs.writes_saved(
        run=run,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        task_id=task_id,
        task_path=task_path,
        channels=[w["channel"] for w in writes],
        interrupts=interrupts or [],
        resumed=resumed,
        errors=errors,
    )


def kept_writes(writes: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """One write per idx: the first of a regular write, the last of a special one."""
    kept: dict[int, dict[str, Any]] = {}
    for write in writes:
        if write["idx"] < 0 or write["idx"] not in kept:
            kept[write["idx"]] = write
    return kept


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
    resumed: list[str] | None = None,
    errors: list[str] | None = None,
) -> dict[str, Any] | None:
    kept = kept_writes(writes)
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
    """Forget a thread: its session, runs, checkpoints, values and writes. Its driver may,
    and an admin (to clear a thread whose key was revoked); to anyone else it is not there."""
    check_writer(principal)
    sessions = AgentSession.objects.for_tenant(principal.tenant).filter(
        agent=AGENT, title=thread_id
    )
    others = sessions.exclude(driver__in=["", driver_of(principal)])
    if not principal.can(Scope.ADMIN) and others.exists():
        raise ThreadDrivenElsewhere()
    # graph_runs hook: pending approval requests are cancelled (audited) first.
    graph_runs.thread_deleting(tenant_id=principal.tenant.pk, thread_id=thread_id)
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
    each with the channel values it names and its pending writes. Members see none."""
    if principal.api_key is None and principal.sees_only_own:
        return []
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
        for w in (
            ExternalWrite.objects.for_tenant(principal.tenant)
            .filter(
                thread_id=thread_id,
                checkpoint_ns=ns,
                checkpoint_id__in=[r.checkpoint_id for r in mine],
            )
            .order_by("id")
        ):  # as written (agentstate_langgraph_read orders them so too)
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


def external_decision(
    *, principal: Principal, thread_id: str, checkpoint_ns: str, interrupt_id: str
) -> dict[str, Any] | None:
    """Where one interrupt of the thread stands: waiting for a person, or the decision made
    on that very interrupt's request (never another request's). None: no such thread."""
    if principal.api_key is None and principal.sees_only_own:
        return None
    run = (
        Run.objects.for_tenant(principal.tenant)
        .filter(session__agent=AGENT, session__title=thread_id, input__checkpoint_ns=checkpoint_ns)
        .only("status", "waiting_for", "wake_payload")
        .first()
    )
    if run is None:
        return None
    request_id = str(graph_runs.request_id_for(run, interrupt_id))
    decision = (run.wake_payload or {}).get("decision")
    if not isinstance(decision, dict) or decision.get("request_id") != request_id:
        decision = None
    return {
        "status": run.status,
        "waiting": run.waiting_for == request_id,
        "request_id": request_id,
        "decision": decision,
    }
