"""Replay a run from checkpoint N: as a new run, or by rewinding this one. Recorded
side effects are answered from the ledger unless the admin asks for them to be made again.
Fenced, audited and one transaction like every console action (see fencing.py).

What a rewind keeps, removes and replaces, row kind by row kind, is the table in
docs/engine.md ("What a rewind keeps and removes"); tests/agents/test_rewind.py holds it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.runtime import extensions, graph_runs, selectors
from agents.runtime.definitions import Agent, get_agent
from agents.runtime.errors import ActionNotAllowed, NoSuchCheckpoint
from agents.runtime.fencing import BUSY, FREE, REQUEUE, audit, changed, fenced
from agents.runtime.models import (
    Checkpoint,
    PackedContext,
    Run,
    RunEvent,
    RunEventLog,
    RunStatus,
    StepAttempt,
    ToolCall,
)
from agents.runtime.progress import publish
from tenants.audit import audit_record
from tenants.principal import Principal


@dataclass(frozen=True)
class _Start:
    seq: int
    step: str
    schema_version: int
    # The run's status right after the checkpoint's step: waiting_* if that step paused.
    status: str = ""


def _start_point(run: Run, seq: int, agent: Agent) -> _Start:
    if seq == 0:
        return _Start(0, agent.first, agent.state_version)
    found = (
        Checkpoint.objects.for_tenant(run.tenant_id)
        .filter(run=run, seq=seq)
        .values_list("next_step", "schema_version", "status")
        .first()
    )
    if found is None or seq > run.step_seq:
        raise NoSuchCheckpoint(f"The run has no checkpoint {seq} (it has 0 to {run.step_seq}).")
    if not found[0]:
        raise NoSuchCheckpoint(f"Checkpoint {seq} ended the run; there is nothing after it.")
    return _Start(seq, found[0], found[1], found[2])


@transaction.atomic
def run_replay(
    *,
    principal: Principal,
    run: Run,
    version: int,
    seq: int,
    as_new_run: bool,
    repeat_side_effects: bool = False,
) -> Run:
    """Run again from checkpoint `seq` (0: from the start), as a new run or by rewinding this
    one. Side-effecting calls recorded after the checkpoint are replayed from the ledger,
    not made again, unless `repeat_side_effects`. Returns the run that will continue."""
    graph_runs.refuse(run, "replay")
    agent = get_agent(run.agent)
    start = _start_point(run, seq, agent)
    if as_new_run:
        return _replay_as_new_run(principal, run, version, start, repeat_side_effects)
    return _rewind(principal, run, version, start, repeat_side_effects)


def _rewind(principal: Principal, run: Run, version: int, start: _Start, repeat: bool) -> Run:
    seen = (
        Run.objects.for_tenant(run.tenant_id)
        .select_for_update()
        .filter(pk=run.pk, version=version)
        .first()
    )
    # None: the run changed meanwhile, and the fence below says so.
    wait, pause = _wait_at(seen, start) if seen is not None else ({}, None)
    fresh = fenced(
        principal,
        run,
        version,
        FREE,
        BUSY,
        **{
            **REQUEUE,
            "step_seq": start.seq,
            "current_step": start.step,
            "state_schema_version": start.schema_version,
            "attempts": 0,
            "output": None,
            "error": None,
            "finished_at": None,
            "waiting_for": "",
            "wake_payload": None,
            "cancel_requested": False,
            **wait,
        },
    )
    _keep_history(run, after_seq=start.seq)
    Checkpoint.objects.for_tenant(run.tenant_id).filter(run=run, seq__gt=start.seq).delete()
    # What the undone steps packed for their model: the steps run again and pack anew.
    PackedContext.objects.for_tenant(run.tenant_id).filter(run=run, seq__gt=start.seq).delete()
    later_calls = ToolCall.objects.for_tenant(run.tenant_id).filter(run=run, seq__gt=start.seq)
    forgotten = later_calls.delete()[0] if repeat else 0
    # Whatever waited on the run stops waiting: its pending approval requests are cancelled.
    extensions.run_cancelled.send(sender=Run, tenant_id=run.tenant_id, run_id=run.pk)
    audit(
        principal,
        fresh,
        "rewound",
        run,
        from_checkpoint=start.seq,
        step=start.step,
        side_effects_repeated=repeat,
        ledger_entries_forgotten=forgotten,
        **({"approval_requested": str(pause.id)} if pause is not None else {}),
    )
    changed(fresh, enqueue=fresh.status == RunStatus.QUEUED)
    if pause is not None:
        # Asked again as the step asked (a new request; decided ones stay as history). A
        # policy may approve it at once, which queues the run.
        extensions.pause_handler("approval")(pause)
        fresh.refresh_from_db()
    return fresh


def _wait_at(run: Run, start: _Start) -> tuple[dict[str, Any], extensions.Pause | None]:
    """How the rewound run goes on from a checkpoint whose step paused: the step is not run
    again, and the step after it never runs without what it waited for. ({}: at once.)"""
    waiting_there = run.step_seq == start.seq and run.status == start.status
    if start.status == RunStatus.WAITING_APPROVAL:
        pause = _pause_again(run, start)
        wait = {"status": start.status, "waiting_for": str(pause.id), "not_before": None}
        return wait, pause
    if start.status == RunStatus.WAITING_EVENT:
        if not waiting_there:
            raise ActionNotAllowed(
                f"Checkpoint {start.seq} waited for an external event; the step after it "
                "received the event and nothing keeps it. Rewind to an earlier checkpoint (the "
                "step waits for the event again) or a later one."
            )
        return {"status": start.status, "waiting_for": run.waiting_for, "not_before": None}, None
    if start.status == RunStatus.WAITING_TIMER and waiting_there:
        return {"status": start.status, "not_before": run.not_before}, None
    return {}, None  # a timer that already went off stays gone off


def _pause_again(run: Run, start: _Start) -> extensions.Pause:
    """The approval the checkpoint's step asked for, to be asked again."""
    # The approvals app offers its requests (extensions.provider); without it nothing is recorded.
    requests_for_run = extensions.provider("approvals.requests_for_run")
    recorded = requests_for_run(tenant_id=run.tenant_id, run_id=run.pk) if requests_for_run else []
    asked = [r for r in recorded if r.checkpoint_seq == start.seq]
    if not asked:
        raise ActionNotAllowed(
            f"Checkpoint {start.seq} waited for a decision that is no longer recorded. Rewind "
            "to an earlier checkpoint: its step asks again."
        )
    last = asked[-1]
    return extensions.Pause(
        id=uuid.uuid4(),
        tenant_id=run.tenant_id,
        run_id=run.pk,
        checkpoint_seq=start.seq,
        step=last.step,
        action=last.action,
        arguments=last.arguments,
        reason=last.reason,
        amount=last.amount,
        # The same time to decide as the step gave, from now.
        due_at=timezone.now() + (last.due_at - last.requested_at) if last.due_at else None,
    )


def _keep_history(run: Run, *, after_seq: int) -> None:
    """The checkpoints a rewind removes carry their steps' successful attempts and
    step.finished events: both become rows of their own first, so the run's history keeps
    what happened (and its events stay numbered without a gap)."""
    undone = list(
        Checkpoint.objects.for_tenant(run.tenant_id)
        .filter(run=run, seq__gt=after_seq, attempt__isnull=False)
        .defer("state")
    )
    StepAttempt.objects.bulk_create(filter(None, map(selectors.attempt_of, undone)))
    finished = RunEventLog.objects.for_tenant(run.tenant_id).filter(
        run=run, kind="step.finished", seq__in=[cp.event_seq for cp in undone]
    )
    RunEvent.objects.bulk_create(
        RunEvent(
            tenant_id=e.tenant_id,
            run_id=e.run_id,
            seq=e.seq,
            kind=e.kind,
            data=e.data,
            created_at=e.created_at,
        )
        for e in finished
    )


def _replay_as_new_run(
    principal: Principal, run: Run, version: int, start: _Start, repeat: bool
) -> Run:
    # The original is not changed, but it must still be the version the admin looked at.
    fenced(principal, run, version, Q(), "", bump=False, updated_at=F("updated_at"))
    new = Run.objects.create(
        tenant=principal.tenant,
        session_id=run.session_id,
        agent=run.agent,
        agent_version=get_agent(run.agent).version,
        current_step=start.step,
        step_seq=start.seq,
        state_schema_version=start.schema_version,
        input=run.input,
        created_by=principal.user,
        not_before=timezone.now(),
    )
    tenant = run.tenant_id
    Checkpoint.objects.bulk_create(
        Checkpoint(
            tenant_id=tenant,
            run=new,
            seq=cp.seq,
            step=cp.step,
            next_step=cp.next_step,
            state=cp.state,
            schema_version=cp.schema_version,
            messages_upto=cp.messages_upto,
            appended=cp.appended,
        )
        for cp in Checkpoint.objects.for_tenant(tenant).filter(run=run, seq__lte=start.seq)
    )
    # Completed calls after the checkpoint are copied so the ledger answers them; calls whose
    # outcome is unknown are not (they go out again, with the new run's key).
    calls = ToolCall.objects.for_tenant(tenant).filter(run=run)
    if repeat:
        calls = calls.filter(seq__lte=start.seq)
    else:
        calls = calls.filter(Q(seq__lte=start.seq) | ~Q(status="intent"))
    copied = ToolCall.objects.bulk_create(
        ToolCall(
            tenant_id=tenant,
            run=new,
            seq=c.seq,
            call_index=c.call_index,
            tool=c.tool,
            idempotency_key=c.idempotency_key,
            arguments=c.arguments,
            status=c.status,
            result=c.result,
            sends=0,
            completed_at=c.completed_at,
        )
        for c in calls
    )
    detail = {"from_checkpoint": start.seq, "side_effects_repeated": repeat}
    audit(principal, run, "replayed", run, new_run=str(new.pk), **detail)
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action="run.started",
        target=new,
        after={
            "agent": new.agent,
            "replay_of": str(run.pk),
            **detail,
            "ledger_copied": len(copied),
        },
    )
    publish(tenant_id=new.tenant_id, run_id=new.pk, kind="run.queued", status=new.status)
    changed(new, enqueue=True)
    return new
