"""Repairs: what an admin can do to a run. Each action is one transaction, audited, and fenced on
the run's version: a conditional UPDATE that matches only the version the admin saw, so two
admins (or an admin and a worker) cannot clobber each other; the loser gets RunChanged.
Replay (rewind to a checkpoint) lives in replay.py, the fence in fencing.py; the console's
pages and bulk actions (agents/console) call them.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from agents.runtime import graph_runs
from agents.runtime.definitions import Agent, get_agent
from agents.runtime.errors import InvalidState
from agents.runtime.fencing import BUSY, FREE, LEASE_EXPIRED, REQUEUE, audit, changed, fenced
from agents.runtime.models import Checkpoint, Run, RunStatus, StepAttempt
from agents.runtime.replay import run_replay  # noqa: F401 - an action like the others
from core import json_input
from core.errors import BadInput
from core.json_schema import schema_errors
from tenants.audit import audit_record
from tenants.principal import Principal


def _record_lost(run: Run, message: str) -> None:
    """Note the interrupted attempt, as the recovery sweep does, so the timeline shows it:
    it started when the worker claimed the run (the claim sets updated_at; lease renewals
    do not) and ended now, or when its lease expired if that was earlier (it stopped
    renewing by then)."""
    now = min(timezone.now(), run.lease_expires_at or timezone.now())
    started = min(run.updated_at or now, now)
    StepAttempt.objects.create(
        tenant_id=run.tenant_id,
        run=run,
        seq=run.step_seq + 1,
        attempt=max(run.attempts, 1),
        step=run.current_step,
        worker=run.lease_owner,
        started_at=started,
        ended_at=now,
        outcome="lost",
        error_code="worker_lost",
        message=message,
        duration_ms=(now - started).total_seconds() * 1000,
    )


# --- the actions ----------------------------------------------------------------------------------


@transaction.atomic
def run_retry(*, principal: Principal, run: Run, version: int) -> Run:
    """Run the failed step again now, with a fresh retry budget (or skip a retry's backoff)."""
    graph_runs.refuse(run, "retry")
    fresh = fenced(
        principal,
        run,
        version,
        Q(status=RunStatus.FAILED) | Q(status=RunStatus.QUEUED, not_before__gt=Now()),
        "Only a failed run, or one waiting to retry, can be retried; this one is {status}.",
        **REQUEUE,
        attempts=0,
        error=None,
        finished_at=None,
        cancel_requested=False,
    )
    audit(principal, fresh, "retried", run, step=fresh.current_step)
    changed(fresh, enqueue=True)
    return fresh


@transaction.atomic
def run_resume(*, principal: Principal, run: Run, version: int) -> Run:
    """Queue a stuck run again: a dead worker's run, a missed timer, a lost queue message."""
    graph_runs.refuse(run, "resume")
    fresh = fenced(
        principal,
        run,
        version,
        LEASE_EXPIRED | Q(status__in=[RunStatus.QUEUED, RunStatus.WAITING_TIMER]),
        "Only a run whose worker was lost, a queued run or a sleeping run can be resumed; "
        "this one is {status} (a worker may still hold it: force-release the lease).",
        **REQUEUE,
    )
    if run.status == RunStatus.RUNNING:
        _record_lost(run, f"Resumed by {principal.label} after the worker's lease expired.")
    audit(principal, fresh, "resumed", run, step=fresh.current_step)
    changed(fresh, enqueue=True)
    return fresh


@transaction.atomic
def run_release_lease(*, principal: Principal, run: Run, version: int) -> Run:
    """Take the run away from its worker (even a live one) and queue it for another.

    The version moves on, so the old worker's writes match nothing from now on."""
    graph_runs.refuse(run, "release")
    fresh = fenced(
        principal,
        run,
        version,
        Q(status=RunStatus.RUNNING),
        "Only a running run holds a lease; this one is {status}.",
        **REQUEUE,
    )
    _record_lost(run, f"Lease released by {principal.label}.")
    audit(principal, fresh, "lease_released", run, worker=run.lease_owner)
    changed(fresh, enqueue=True)
    return fresh


@transaction.atomic
def run_resolve(*, principal: Principal, run: Run, version: int, note: str = "") -> Run:
    """Mark the run as dealt with: it leaves the stuck list until it changes again."""
    fresh = fenced(
        principal,
        run,
        version,
        Q(),
        "",
        resolved_at=Now(),
        resolved_by=principal.user,
        resolution_note=note[:2000],
    )
    audit(principal, fresh, "resolved", run, note=note[:2000])
    return fresh


# --- state ----------------------------------------------------------------------------------------


def parse_state(raw: str, agent: Agent) -> dict[str, Any]:
    """The edited state as a dict, or InvalidState listing every problem."""
    try:
        state = json_input.loads(raw)
    except BadInput as exc:
        if exc.syntax is not None:  # said with its line, column and a marker under the spot
            raise InvalidState([str(exc.syntax)], syntax=exc.syntax) from None
        found = [f"{name}: {' '.join(why)}" for name, why in (exc.fields or {}).items()]
        raise InvalidState(found or [exc.message]) from None
    if not isinstance(state, dict):
        raise InvalidState(["The state must be a JSON object ({…})."])
    if agent.state_schema is not None:
        problems = [
            f"{'/'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}"
            for e in schema_errors(agent.state_schema, state)
        ]
        if problems:
            raise InvalidState(problems)
    return state


@transaction.atomic
def run_edit_state(*, principal: Principal, run: Run, version: int, state: str) -> Run:
    """Replace the state of the run's latest checkpoint (validated; nothing saved if not)."""
    graph_runs.refuse(run, "state")
    agent = get_agent(run.agent)
    new_state = parse_state(state, agent)
    fresh = fenced(
        principal,
        run,
        version,
        FREE,
        BUSY,
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
    changed(fresh, enqueue=False)
    return fresh
