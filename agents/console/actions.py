"""What an admin can do to a run. Each action is one transaction, audited, and fenced on
the run's version: a conditional UPDATE that matches only the version the admin saw, so two
admins (or an admin and a worker) cannot clobber each other; the loser gets RunChanged.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import jsonschema
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from agents.console.errors import ActionNotAllowed, InvalidState, NoSuchCheckpoint, RunChanged
from agents.definitions import Agent, get_agent
from agents.models import WAITING, Checkpoint, Run, RunStatus, StepAttempt, ToolCall
from agents.progress import publish
from tenants.principal import Principal
from tenants.services import audit_record

logger = logging.getLogger(__name__)

# A run whose worker holds a live lease is being worked on: only cancel, release and resolve
# apply to it. "Free" is everything else.
_LEASE_EXPIRED = Q(status=RunStatus.RUNNING, lease_expires_at__lt=Now()) | Q(
    status=RunStatus.RUNNING, lease_owner=""
)
_FREE = ~Q(status=RunStatus.RUNNING) | _LEASE_EXPIRED
_REQUEUE = {
    "status": RunStatus.QUEUED,
    "lease_owner": "",
    "lease_expires_at": None,
    "not_before": Now(),  # also marks when the run was queued (stuck detection)
    "resolved_at": None,
}


def _fenced(
    principal: Principal,
    run: Run,
    version: int,
    allowed: Q,
    refusal: str,
    *,
    bump: bool = True,
    **fields: Any,
) -> Run:
    """UPDATE the run if it still has `version` and matches `allowed`; else explain why not."""
    runs = Run.objects.for_tenant(principal.tenant).filter(pk=run.pk)
    changes: dict[str, Any] = {"version": F("version") + 1, "updated_at": Now()} if bump else {}
    if not runs.filter(allowed, version=version).update(**changes, **fields):
        current = runs.first()
        if current is None or current.version != version:
            raise RunChanged(detail={"version": getattr(current, "version", None)})
        raise ActionNotAllowed(refusal.format(status=current.get_status_display().lower()))
    return runs.get()


def _audit(principal: Principal, run: Run, action: str, before: Run, **after: Any) -> None:
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action=f"run.console.{action}",
        target=run,
        before={"status": before.status, "version": before.version},
        after={"status": run.status, "version": run.version, **after},
    )
    logger.info(
        "console action %s on run %s",
        action,
        run.pk,
        extra={"tenant_id": str(run.tenant_id), "run_id": str(run.pk), "action": action},
    )


def _changed(run: Run, *, enqueue: bool) -> None:
    publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.status", status=run.status)
    if enqueue:
        from agents.tasks import enqueue_run

        tenant_id, run_id = run.tenant_id, run.pk
        transaction.on_commit(lambda: enqueue_run(tenant_id=tenant_id, run_id=run_id))


def _record_lost(run: Run, message: str) -> None:
    """Note the interrupted attempt, as the recovery sweep does, so the timeline shows it."""
    now = timezone.now()
    StepAttempt.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        seq=run.step_seq + 1,
        attempt=max(run.attempts, 1),
        step=run.current_step,
        worker=run.lease_owner,
        started_at=run.lease_expires_at or now,
        ended_at=now,
        outcome="lost",
        error_code="worker_lost",
        message=message,
    )


# --- the actions -------------------------------------------------------------------------------


@transaction.atomic
def run_retry(*, principal: Principal, run: Run, version: int) -> Run:
    """Run the failed step again now, with a fresh retry budget (or skip a retry's backoff)."""
    fresh = _fenced(
        principal,
        run,
        version,
        Q(status=RunStatus.FAILED) | Q(status=RunStatus.QUEUED, not_before__gt=Now()),
        "Only a failed run, or one waiting to retry, can be retried; this one is {status}.",
        **_REQUEUE,
        attempts=0,
        error=None,
        finished_at=None,
        cancel_requested=False,
    )
    _audit(principal, fresh, "retried", run, step=fresh.current_step)
    _changed(fresh, enqueue=True)
    return fresh


@transaction.atomic
def run_resume(*, principal: Principal, run: Run, version: int) -> Run:
    """Queue a stuck run again: a dead worker's run, a missed timer, a lost queue message."""
    fresh = _fenced(
        principal,
        run,
        version,
        _LEASE_EXPIRED | Q(status__in=[RunStatus.QUEUED, RunStatus.WAITING_TIMER]),
        "Only a run whose worker was lost, a queued run or a sleeping run can be resumed; "
        "this one is {status} (a worker may still hold it: force-release the lease).",
        **_REQUEUE,
    )
    if run.status == RunStatus.RUNNING:
        _record_lost(run, f"Resumed by {principal.label} after the worker's lease expired.")
    _audit(principal, fresh, "resumed", run, step=fresh.current_step)
    _changed(fresh, enqueue=True)
    return fresh


@transaction.atomic
def run_cancel(*, principal: Principal, run: Run, version: int) -> Run:
    """Cancel now; a run a live worker holds stops at its next step boundary."""
    from approvals.services import requests_cancel_for_run

    try:
        fresh = _fenced(
            principal,
            run,
            version,
            (Q(status__in=[RunStatus.QUEUED, *WAITING]) | _LEASE_EXPIRED),
            "",
            status=RunStatus.CANCELLED,
            lease_owner="",
            lease_expires_at=None,
            finished_at=Now(),
            cancel_requested=True,
        )
        requests_cancel_for_run(tenant_id=fresh.tenant_id, run_id=fresh.pk)
    except ActionNotAllowed:
        # Not bumping the version: the worker that holds the run must still persist its step.
        fresh = _fenced(
            principal,
            run,
            version,
            Q(status=RunStatus.RUNNING),
            "The run already finished ({status}).",
            bump=False,
            cancel_requested=True,
        )
    _audit(principal, fresh, "cancelled", run, cancel_requested=fresh.cancel_requested)
    _changed(fresh, enqueue=False)
    return fresh


@transaction.atomic
def run_release_lease(*, principal: Principal, run: Run, version: int) -> Run:
    """Take the run away from its worker (even a live one) and queue it for another.

    The version moves on, so the old worker's writes match nothing from now on."""
    fresh = _fenced(
        principal,
        run,
        version,
        Q(status=RunStatus.RUNNING),
        "Only a running run holds a lease; this one is {status}.",
        **_REQUEUE,
    )
    _record_lost(run, f"Lease released by {principal.label}.")
    _audit(principal, fresh, "lease_released", run, worker=run.lease_owner)
    _changed(fresh, enqueue=True)
    return fresh


@transaction.atomic
def run_resolve(*, principal: Principal, run: Run, version: int, note: str = "") -> Run:
    """Mark the run as dealt with: it leaves the stuck list until it changes again."""
    fresh = _fenced(
        principal,
        run,
        version,
        Q(),
        "",
        resolved_at=Now(),
        resolved_by=principal.user,
        resolution_note=note[:2000],
    )
    _audit(principal, fresh, "resolved", run, note=note[:2000])
    return fresh


# --- state -----------------------------------------------------------------------------------


def parse_state(raw: str, agent: Agent) -> dict[str, Any]:
    """The edited state as a dict, or InvalidState listing every problem."""
    try:
        state = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidState([f"Not valid JSON: {exc.msg} (line {exc.lineno})."]) from None
    if not isinstance(state, dict):
        raise InvalidState(["The state must be a JSON object ({…})."])
    if agent.state_schema is not None:
        validator = jsonschema.Draft202012Validator(agent.state_schema)
        problems = [
            f"{'/'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}"
            for e in sorted(validator.iter_errors(state), key=lambda e: list(e.absolute_path))
        ]
        if problems:
            raise InvalidState(problems)
    return state


@transaction.atomic
def run_edit_state(*, principal: Principal, run: Run, version: int, state: str) -> Run:
    """Replace the state of the run's latest checkpoint (validated; nothing saved if not)."""
    agent = get_agent(run.agent)
    new_state = parse_state(state, agent)
    fresh = _fenced(
        principal,
        run,
        version,
        _FREE,
        "A worker is running this step; release the lease first ({status}).",
        state_schema_version=agent.state_version,
    )
    checkpoints = Checkpoint.objects.for_tenant(run.tenant_id).filter(run=run)
    old = checkpoints.filter(seq=fresh.step_seq).values_list("state", flat=True).first()
    if old is None:
        # No step has run yet: the state the first step will see is this one.
        Checkpoint.objects.create(
            tenant_id=run.tenant_id,
            run=fresh,
            seq=fresh.step_seq,
            step="(edited by an admin)",
            next_step=fresh.current_step,
            state=new_state,
            schema_version=agent.state_version,
        )
    else:
        checkpoints.filter(seq=fresh.step_seq).update(
            state=new_state, schema_version=agent.state_version
        )
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action="run.console.state_edited",
        target=fresh,
        before={"version": version, "checkpoint": fresh.step_seq, "state": old},
        after={"version": fresh.version, "checkpoint": fresh.step_seq, "state": new_state},
    )
    _changed(fresh, enqueue=False)
    return fresh


# --- replay ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Start:
    seq: int
    step: str
    schema_version: int


def _start_point(run: Run, seq: int, agent: Agent) -> _Start:
    if seq == 0:
        return _Start(0, agent.first, agent.state_version)
    found = (
        Checkpoint.objects.for_tenant(run.tenant_id)
        .filter(run=run, seq=seq)
        .values_list("next_step", "schema_version")
        .first()
    )
    if found is None or seq > run.step_seq:
        raise NoSuchCheckpoint(f"The run has no checkpoint {seq} (it has 0 to {run.step_seq}).")
    if not found[0]:
        raise NoSuchCheckpoint(f"Checkpoint {seq} ended the run; there is nothing after it.")
    return _Start(seq, found[0], found[1])


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
    agent = get_agent(run.agent)
    start = _start_point(run, seq, agent)
    if as_new_run:
        return _replay_as_new_run(principal, run, version, start, repeat_side_effects)
    return _rewind(principal, run, version, start, repeat_side_effects)


def _rewind(principal: Principal, run: Run, version: int, start: _Start, repeat: bool) -> Run:
    from approvals.services import requests_cancel_for_run

    fresh = _fenced(
        principal,
        run,
        version,
        _FREE,
        "A worker is running this step; release the lease first ({status}).",
        **_REQUEUE,
        step_seq=start.seq,
        current_step=start.step,
        state_schema_version=start.schema_version,
        attempts=0,
        output=None,
        error=None,
        finished_at=None,
        waiting_for="",
        wake_payload=None,
        cancel_requested=False,
    )
    _keep_history(run, after_seq=start.seq)
    Checkpoint.objects.for_tenant(run.tenant_id).filter(run=run, seq__gt=start.seq).delete()
    later_calls = ToolCall.objects.for_tenant(run.tenant_id).filter(run=run, seq__gt=start.seq)
    forgotten = later_calls.delete()[0] if repeat else 0
    requests_cancel_for_run(tenant_id=run.tenant_id, run_id=run.pk)
    _audit(
        principal,
        fresh,
        "rewound",
        run,
        from_checkpoint=start.seq,
        step=start.step,
        side_effects_repeated=repeat,
        ledger_entries_forgotten=forgotten,
    )
    _changed(fresh, enqueue=True)
    return fresh


# The checkpoints a rewind removes carry their steps' step.finished events and successful
# attempts; both become rows of their own first, so the run's history keeps what happened
# (and its events stay numbered without a gap).
KEEP_HISTORY_SQL = """
WITH undone AS (
    SELECT * FROM agents_checkpoint
     WHERE run_id = %(run)s AND seq > %(after)s AND attempt IS NOT NULL
), events AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT l.tenant_id, l.run_id, l.seq, l.kind, l.data, l.created_at
      FROM agents_runevent_log l JOIN undone u ON l.run_id = u.run_id AND l.seq = u.event_seq
     WHERE l.kind = 'step.finished'
)
INSERT INTO agents_stepattempt
    (tenant_id, run_id, seq, attempt, step, worker, started_at, ended_at, outcome,
     error_class, error_code, message, traceback, duration_ms)
SELECT tenant_id, run_id, seq, attempt, step, worker, coalesce(started_at, created_at),
       created_at, 'succeeded', '', '', '', '', coalesce(duration_ms, 0)
  FROM undone
"""


def _keep_history(run: Run, *, after_seq: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(KEEP_HISTORY_SQL, {"run": str(run.pk), "after": after_seq})


def _replay_as_new_run(
    principal: Principal, run: Run, version: int, start: _Start, repeat: bool
) -> Run:
    # The original is not changed, but it must still be the version the admin looked at.
    _fenced(principal, run, version, Q(), "", bump=False, updated_at=F("updated_at"))
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
    _audit(principal, run, "replayed", run, new_run=str(new.pk), **detail)
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
    _changed(new, enqueue=True)
    return new


# --- bulk --------------------------------------------------------------------------------------

BULK_ACTIONS = {
    "retry": run_retry,
    "resume": run_resume,
    "cancel": run_cancel,
    "resolve": run_resolve,
}


@dataclass(frozen=True)
class BulkOutcome:
    run_id: str
    ok: bool
    message: str


def runs_bulk(
    *, principal: Principal, action: str, items: list[tuple[Run, int]]
) -> list[BulkOutcome]:
    """Apply one action to many runs, each in its own savepoint: one refusal (a 409) does not
    undo the others."""
    from tenants.errors import AppError

    fn = BULK_ACTIONS[action]
    outcomes = []
    for run, version in items:
        try:
            fn(principal=principal, run=run, version=version)
        except AppError as exc:
            outcomes.append(BulkOutcome(str(run.pk), False, exc.message))
        else:
            outcomes.append(BulkOutcome(str(run.pk), True, ""))
    return outcomes
