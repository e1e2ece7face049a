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

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
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
    Checkpoint,
    ExternalBlob,
    ExternalCheckpoint,
    ExternalWrite,
    Run,
    RunStatus,
)
from agents.runtime.progress import publish
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
        if found.driver and found.driver != me:
            raise ThreadDrivenElsewhere()
        if not found.driver:  # kept before threads had drivers: its next writer adopts it
            AgentSession.objects.filter(pk=found.pk).update(driver=me)
        return found
    if not create:
        return None
    try:
        with transaction.atomic():  # a savepoint: a concurrent first write may win the race
            return AgentSession.objects.create(
                tenant=principal.tenant, agent=AGENT, title=thread_id, user=None, driver=me
            )
    except IntegrityError:
        return _session(principal, thread_id, create=False)


def _run(principal: Principal, thread_id: str, ns: str, *, create: bool) -> Run | None:
    """The run of (thread, namespace), locked; made on the first write when `create`."""
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


@transaction.atomic
def external_checkpoint_put(
    *,
    principal: Principal,
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
) -> ExternalCheckpoint:
    """Save (or replace) one checkpoint of an external thread, with the channel values it
    introduced; the same id again replaces it, as LangGraph's savers do."""
    run = _run(principal, thread_id, checkpoint_ns, create=True)
    assert run is not None
    ExternalBlob.objects.bulk_create(
        [
            ExternalBlob(
                tenant=principal.tenant,
                run=run,
                thread_id=thread_id,
                checkpoint_ns=checkpoint_ns,
                channel=b["channel"],
                version=b["version"],
                type=b["type"],
                blob=b["blob"],
            )
            for b in blobs
        ],
        ignore_conflicts=True,  # a version's value never changes
    )
    fields = {
        "parent_checkpoint_id": parent_checkpoint_id,
        "type": type,
        "blob": blob,
        "metadata": metadata,
        "channel_versions": channel_versions,
    }
    existing = (
        ExternalCheckpoint.objects.for_tenant(principal.tenant)
        .filter(thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id)
        .select_related("shown_as")
        .first()
    )
    if existing is not None:
        for name, value in fields.items():
            setattr(existing, name, value)
        existing.save(update_fields=list(fields))
        Checkpoint.objects.filter(pk=existing.shown_as_id).update(state=preview, step=step)
        # graph_runs hook: the run's status follows the graph.
        graph_runs.checkpoint_saved(
            run=run,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            shown_id=existing.shown_as_id,
            next_nodes=next,
            source=str(metadata.get("source", "")),
            replaced=True,
        )
        return existing
    seq = (Checkpoint.objects.filter(run=run).aggregate(last=Max("seq"))["last"] or 0) + 1
    shown = Checkpoint.objects.create(
        tenant=principal.tenant,
        run=run,
        seq=seq,
        step=step[:100],
        state=preview,
        schema_version=1,
        attempt=1,
        status=RunStatus.SUCCEEDED,
        started_at=timezone.now(),
    )
    saved = ExternalCheckpoint.objects.create(
        tenant=principal.tenant,
        shown_as=shown,
        run=run,
        thread_id=thread_id,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        **fields,
    )
    Run.objects.filter(pk=run.pk).update(
        current_step=step[:100],
        step_seq=seq,
        finished_at=timezone.now(),
        version=run.version + 1,
    )
    publish(
        tenant_id=run.tenant_id,
        run_id=run.pk,
        kind="step.finished",
        step=step[:100],
        step_seq=seq,
        attempt=1,
        status=RunStatus.SUCCEEDED,
        next_step="",
        duration_ms=None,  # its node ran elsewhere: not timed here
    )
    # graph_runs hook: the run's status follows the graph.
    graph_runs.checkpoint_saved(
        run=run,
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        shown_id=shown.pk,
        next_nodes=next,
        source=str(metadata.get("source", "")),
    )
    return saved


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
    for write in writes:
        key = {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint_id,
            "task_id": task_id,
            "idx": write["idx"],
        }
        values = {
            "channel": write["channel"],
            "type": write["type"],
            "blob": write["blob"],
            "task_path": task_path,
        }
        rows = ExternalWrite.objects.for_tenant(principal.tenant).filter(**key)
        if rows.exists():
            if write["idx"] < 0:
                rows.update(**values)
            continue
        ExternalWrite.objects.create(tenant=principal.tenant, run=run, **key, **values)
    # graph_runs hook: interrupts open requests (root namespace), resumes and errors move
    # the run's status.
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
