"""Writes of the agents app: start, message, cancel, wake. Views and tasks call these."""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from agents.runtime import errors, extensions, fencing, graph_runs, queue
from agents.runtime.definitions import get_agent
from agents.runtime.models import (
    FINISHED,
    WAITING,
    AgentSession,
    Message,
    MessageRole,
    Run,
    RunStatus,
)
from agents.runtime.progress import publish
from core import sql
from tenants.audit import audit_record
from tenants.principal import Principal


def _enqueue(run: Run) -> None:
    transaction.on_commit(lambda: queue.enqueue_run(tenant_id=run.tenant_id, run_id=run.pk))


@transaction.atomic
def session_create(*, principal: Principal, agent: str, user=None, title: str = "") -> AgentSession:
    """Open a conversation with `agent` for `user` (members always for themselves)."""
    if not get_agent(agent).startable:
        raise errors.AgentNotStartable(
            f"Conversations with {agent!r} are opened by the process that runs it."
        )
    if principal.sees_only_own or user is None:
        user = principal.user
    return AgentSession.objects.create(
        tenant=principal.tenant, agent=agent, user=user, title=title[:200]
    )


@transaction.atomic
def run_start(
    *, principal: Principal, agent: str, input: dict[str, Any], session: AgentSession | None = None
) -> Run:
    """Create a queued run of `agent`; it is enqueued when the transaction commits."""
    definition = get_agent(agent)
    if not definition.startable:
        raise errors.AgentNotStartable(
            f"Runs of {agent!r} are made by the process that runs it, not started here."
        )
    run = Run.objects.create(
        tenant=principal.tenant,
        session=session,
        agent=definition.name,
        agent_version=definition.version,
        current_step=definition.first,
        state_schema_version=definition.state_version,
        input=input,
        created_by=principal.user,
    )
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action="run.started",
        target=run,
        after={"agent": agent, "input": input},
    )
    publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.queued", status=run.status)
    _enqueue(run)
    return run


RESERVE_MESSAGE_SEQS_SQL = sql.load("agents.runtime", "reserve_message_seqs")


def messages_append(
    *, tenant_id: Any, session_id: Any, run_id: Any | None, messages: list[dict[str, Any]]
) -> list[Message]:
    """Append to the transcript in the caller's transaction; seq comes from the session row."""
    with connection.cursor() as cursor:
        cursor.execute(
            RESERVE_MESSAGE_SEQS_SQL,
            {"count": len(messages), "session": str(session_id), "tenant": str(tenant_id)},
        )
        row = cursor.fetchone()
    if row is None:
        raise errors.RunFinished("The conversation no longer exists.")
    first = row[0] - len(messages) + 1
    created = Message.objects.bulk_create(
        Message(
            tenant_id=tenant_id,
            session_id=session_id,
            run_id=run_id,
            seq=first + i,
            role=m["role"],
            content=m.get("content", ""),
            tool_call=m.get("tool_call"),
            tool_result=m.get("tool_result"),
        )
        for i, m in enumerate(messages)
    )
    if created:
        # One event for the batch (a step that says ten messages records one event and
        # updates its run once): the first message's number, and the last's when there are more.
        roles = {m.role for m in created}
        batch: dict[str, Any] = {"last_message_seq": created[-1].seq} if len(created) > 1 else {}
        publish(
            tenant_id=tenant_id,
            run_id=run_id or "",
            kind="message.appended",
            session_id=str(session_id),
            message_seq=created[0].seq,
            **batch,
            role=roles.pop() if len(roles) == 1 else "agent",
        )
    _after_append(tenant_id, session_id, created, inherited=row[1], summary_upto=row[2])
    return created


def _after_append(
    tenant_id: Any, session_id: Any, created: list[Message], *, inherited: int, summary_upto: int
) -> None:
    """Tell whoever keeps conversation state (the hot session cache, rolling summaries) what
    was appended, as the cache stores it; they act once it commits."""
    appended = [
        {
            "pos": inherited + m.seq,
            "session": str(session_id),
            "seq": m.seq,
            "role": m.role,
            "content": m.content,
            "tool_call": m.tool_call,
            "tool_result": m.tool_result,
            "tokens": None,
        }
        for m in created
    ]
    extensions.messages_appended.send(
        sender=Message,
        tenant_id=tenant_id,
        session_id=session_id,
        messages=appended,
        count=inherited + created[-1].seq if created else 0,
        summary_upto=summary_upto,
    )


@transaction.atomic
def message_post(
    *,
    principal: Principal,
    session: AgentSession,
    content: str,
    input_overrides: dict[str, Any] | None = None,
) -> tuple[Message, Run]:
    """A user message: queued to a run that is working, else it starts a new run, with the input
    the conversation's last run had (its customer, say), `input_overrides` (a member's own
    customer: they never run for someone else) and this message."""
    definition = get_agent(session.agent)
    active = (
        Run.objects.for_tenant(principal.tenant)
        .filter(session=session)
        .exclude(status__in=FINISHED)
        .select_for_update()
        .order_by("-created_at")
        .first()
    )
    if active is not None and active.status == RunStatus.RUNNING:
        if definition.on_message_while_running == "reject":
            raise errors.SessionBusy()
        if definition.on_message_while_running == "interrupt":
            Run.objects.for_tenant(principal.tenant).filter(pk=active.pk).update(
                cancel_requested=True
            )
            active = None
    [message] = messages_append(
        tenant_id=principal.tenant.pk,
        session_id=session.pk,
        run_id=None,
        messages=[{"role": MessageRole.USER, "content": content}],
    )
    if active is None or active.status in FINISHED:
        last_input = (
            Run.objects.for_tenant(principal.tenant)
            .filter(session=session)
            .order_by("-created_at")
            .values_list("input", flat=True)
            .first()
        )
        carried = last_input if isinstance(last_input, dict) else {}
        active = run_start(
            principal=principal,
            agent=session.agent,
            input={**carried, **(input_overrides or {}), "message": content},
            session=session,
        )
    return message, active


@transaction.atomic
def conversation_start(
    *,
    principal: Principal,
    agent: str,
    message: str,
    input: dict[str, Any] | None = None,
    title: str = "",
) -> Run:
    """Open a conversation whose first user message starts a run of `agent`."""
    session = session_create(principal=principal, agent=agent, title=title)
    run = run_start(
        principal=principal,
        agent=agent,
        session=session,
        input={**(input or {}), "message": message},
    )
    messages_append(
        tenant_id=principal.tenant.pk,
        session_id=session.pk,
        run_id=run.pk,
        messages=[{"role": MessageRole.USER, "content": message}],
    )
    return run


@transaction.atomic
def session_fork(
    *, principal: Principal, session: AgentSession, at_seq: Any, title: str = ""
) -> AgentSession:
    """A new conversation that sees `session`'s thread up to its message `at_seq`, then its
    own messages. No message is copied; the summary is carried over when it still applies."""
    last = (
        AgentSession.objects.for_tenant(principal.tenant)
        .filter(pk=session.pk)
        .values_list("last_seq", flat=True)
    )
    last_seq = last.first() or 0
    valid = isinstance(at_seq, int) and not isinstance(at_seq, bool) and 1 <= at_seq <= last_seq
    if not valid or not (
        Message.objects.for_tenant(principal.tenant).filter(session=session, seq=at_seq).exists()
    ):
        raise errors.ForkPointInvalid(
            f"Message {at_seq!r} is not in this conversation (it has messages 1 to {last_seq}).",
            detail={"at_seq": at_seq, "last_seq": last_seq},
        )
    inherited = session.inherited_messages + at_seq
    keeps_summary = 0 < session.summary_upto <= inherited
    fork = AgentSession.objects.create(
        tenant=principal.tenant,
        user=session.user,
        agent=session.agent,
        title=(title or f"{session} (fork at {at_seq})")[:200],
        parent=session,
        fork_seq=at_seq,
        inherited_messages=inherited,
        summary=session.summary if keeps_summary else "",
        summary_upto=session.summary_upto if keeps_summary else 0,
        summary_updated_at=session.summary_updated_at if keeps_summary else None,
    )
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action="session.forked",
        target=fork,
        after={"parent": str(session.pk), "at_seq": at_seq},
    )
    return fork


@transaction.atomic
def run_cancel(*, principal: Principal, run: Run, version: int | None = None) -> Run:
    """Cancel at once if not running; a running run stops at its next step boundary.

    With `version` (the admin console: the version the admin saw), the cancel is fenced on it
    (RunChanged if the run moved meanwhile), a run whose worker's lease expired is cancelled
    at once too, and the audit names the console."""
    graph_runs.refuse(run, "cancel")
    if version is not None:
        return _run_cancel_fenced(principal=principal, run=run, version=version)
    runs = Run.objects.for_tenant(principal.tenant).filter(pk=run.pk)
    before = run.status
    if runs.filter(status__in=[RunStatus.QUEUED, *WAITING]).update(
        status=RunStatus.CANCELLED,
        version=F("version") + 1,
        lease_owner="",
        finished_at=_now(),
        cancel_requested=True,
    ):
        extensions.run_cancelled.send(sender=Run, tenant_id=run.tenant_id, run_id=run.pk)
    elif not runs.filter(status=RunStatus.RUNNING).update(cancel_requested=True):
        raise errors.RunFinished(f"The run already {run.status}.")
    run.refresh_from_db()
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action="run.cancelled",
        target=run,
        before={"status": before},
        after={"status": run.status},
    )
    publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.status", status=run.status)
    return run


def _run_cancel_fenced(*, principal: Principal, run: Run, version: int) -> Run:
    try:
        fresh = fencing.fenced(
            principal,
            run,
            version,
            (Q(status__in=[RunStatus.QUEUED, *WAITING]) | fencing.LEASE_EXPIRED),
            "",
            status=RunStatus.CANCELLED,
            lease_owner="",
            lease_expires_at=None,
            finished_at=Now(),
            cancel_requested=True,
        )
        extensions.run_cancelled.send(sender=Run, tenant_id=fresh.tenant_id, run_id=fresh.pk)
    except errors.ActionNotAllowed:
        # Not bumping the version: the worker that holds the run must still persist its step.
        fresh = fencing.fenced(
            principal,
            run,
            version,
            Q(status=RunStatus.RUNNING),
            "The run already finished ({status}).",
            bump=False,
            cancel_requested=True,
        )
    fencing.audit(principal, fresh, "cancelled", run, cancel_requested=fresh.cancel_requested)
    fencing.changed(fresh, enqueue=False)
    return fresh


@transaction.atomic
def run_send_event(*, principal: Principal, run: Run, name: str, payload: Any) -> Run:
    """Deliver an external event to a run waiting for it; the run wakes on commit."""
    graph_runs.refuse(run, "event")
    updated = (
        Run.objects.for_tenant(principal.tenant)
        .filter(pk=run.pk, status=RunStatus.WAITING_EVENT, waiting_for=name)
        .update(
            status=RunStatus.QUEUED,
            waiting_for="",
            version=F("version") + 1,
            wake_payload={"event": {"name": name, "payload": payload}},
        )
    )
    if not updated:
        run.refresh_from_db()
        waiting = (
            f"waiting for event {run.waiting_for!r}"
            if run.status == "waiting_event"
            else run.status
        )
        raise errors.RunNotWaiting(
            f"The run is not waiting for event {name!r} (it is {waiting}).",
            detail={"status": run.status, "waiting_for": run.waiting_for},
        )
    run.refresh_from_db()
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action="run.event",
        target=run,
        after={"event": name},
    )
    publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.status", status=run.status)
    _enqueue(run)
    return run


def _now():
    return timezone.now()
