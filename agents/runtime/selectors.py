"""Reads of the agents app. Every read names its tenant; members see only their own."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Trunc
from django.http import Http404
from django.utils import timezone

from agents.runtime import run_counts
from agents.runtime.models import (
    AgentSession,
    AttemptOutcome,
    Checkpoint,
    Message,
    PackedContext,
    Run,
    RunEventLog,
    RunStatus,
    StepAttempt,
    ToolCall,
)
from core import sql
from core.recent import Recent
from tenants.principal import Principal
from tenants.scope import tenant_scope


def sessions_for(principal: Principal) -> QuerySet[AgentSession]:
    sessions = AgentSession.objects.for_tenant(principal.tenant)
    if principal.sees_only_own:
        sessions = sessions.filter(user=principal.user)
    return sessions.order_by("-created_at")


def session_for(principal: Principal, session_id: Any) -> AgentSession:
    """The session, or 404 for anyone who may not see it (other tenants, other members)."""
    try:
        return sessions_for(principal).get(pk=session_id)
    except (AgentSession.DoesNotExist, ValueError, TypeError, ValidationError):
        raise Http404 from None


def runs_for(
    principal: Principal, *, status: str | None = None, agent: str | None = None
) -> QuerySet[Run]:
    runs = Run.objects.for_tenant(principal.tenant).select_related("session")
    if principal.sees_only_own:
        runs = runs.filter(Q(session__user=principal.user) | Q(created_by=principal.user))
    if status:
        runs = runs.filter(status=status)
    if agent:
        runs = runs.filter(agent=agent)
    return runs.order_by("-created_at")


def status_counts(principal: Principal) -> list[dict[str, Any]]:
    """The runs the principal sees, counted by status (every status, zeros included), for the
    runs page, the admin console and their live feeds: a member's own (a few, by index), or
    the tenant's from the counts the database keeps (the same cost at any size)."""
    if principal.sees_only_own:
        return runs_counted(runs_for(principal))
    return tenant_status_counts(principal.tenant.pk)


def runs_counted(runs: QuerySet[Run]) -> list[dict[str, Any]]:
    """How many of `runs` are in each status, counted by a scan of them."""
    return _by_status_rows(dict(runs.order_by().values_list("status").annotate(n=Count("id"))))


def _by_status_rows(counts: dict[str, int]) -> list[dict[str, Any]]:
    return [
        {"value": value, "label": label, "count": counts.get(value, 0)}
        for value, label in RunStatus.choices
    ]


def tenant_status_counts(tenant_id: Any) -> list[dict[str, Any]]:
    """Every run of the tenant counted by status, as `status_counts` gives them, from the
    counts the database keeps (run_counts.py): one indexed read at any size."""
    return _by_status_rows(run_counts.by_status(tenant_id))


# The live feeds of every socket watching a tenant render the same event: its counts are
# read once per event in a process (after the event's commit, so they include it).
_counts_after_event: Recent[list[dict[str, Any]]] = Recent(seconds=30.0)


def tenant_status_counts_after(tenant_id: Any, event: dict[str, Any]) -> list[dict[str, Any]]:
    """`tenant_status_counts` as of `event`, read once per stored event in this process
    (a live-only event, with no number, reads them afresh)."""
    if event.get("seq") is None:
        return tenant_status_counts(tenant_id)
    seen = (str(tenant_id), str(event.get("run_id")), event["seq"], event.get("kind"))
    return _counts_after_event.get(seen, lambda: tenant_status_counts(tenant_id))


def run_for(principal: Principal, run_id: Any) -> Run:
    """The run, or 404 for anyone who may not see it."""
    try:
        return runs_for(principal).get(pk=run_id)
    except (Run.DoesNotExist, ValueError, TypeError, ValidationError):
        raise Http404 from None


def run_timeline(run: Run) -> dict[str, list]:
    """Checkpoints, attempts and ledger entries of one run, oldest first."""
    tenant = run.tenant_id
    checkpoints = list(Checkpoint.objects.for_tenant(tenant).filter(run=run).order_by("seq"))
    return {
        "checkpoints": checkpoints,
        "attempts": step_attempts(run, checkpoints),
        "tool_calls": list(ToolCall.objects.for_tenant(tenant).filter(run=run)),
    }


def step_attempts(
    run: Run, checkpoints: list[Checkpoint], *, only: set[int] | None = None
) -> list[StepAttempt]:
    """Every attempt at the run's steps, oldest first: the StepAttempt rows (attempts that
    wrote no checkpoint: retried, failed, lost) and the attempt each of `checkpoints`
    records (the run's checkpoints, or those numbered `only`)."""
    rows = StepAttempt.objects.for_tenant(run.tenant_id).filter(run=run)
    if only is not None:
        rows = rows.filter(seq__in=only)
    found = list(rows) + [a for a in map(attempt_of, checkpoints) if a is not None]
    found.sort(key=lambda a: (a.seq, a.attempt, a.ended_at, a.id or 0))
    return found


def recoveries(run: Run) -> list[RunEventLog]:
    """The claims that picked the run up again after the recovery sweep took it back from a
    lost worker (`step.started` events with `recovered`), oldest first."""
    found = RunEventLog.objects.for_tenant(run.tenant_id).filter(run=run, kind="step.started")
    return list(found.filter(data__recovered=True).order_by("seq"))


def attempt_of(checkpoint: Checkpoint) -> StepAttempt | None:
    """The successful attempt that wrote `checkpoint` (None for an admin's repair)."""
    if checkpoint.attempt is None:
        return None
    return StepAttempt(
        tenant_id=checkpoint.tenant_id,
        run_id=checkpoint.run_id,
        seq=checkpoint.seq,
        attempt=checkpoint.attempt,
        step=checkpoint.step,
        worker=checkpoint.worker,
        started_at=checkpoint.started_at or checkpoint.created_at,
        ended_at=checkpoint.created_at,
        outcome=AttemptOutcome.SUCCEEDED,
        duration_ms=checkpoint.duration_ms or 0.0,
    )


def transcript(session: AgentSession) -> QuerySet[Message]:
    return Message.objects.for_tenant(session.tenant_id).filter(session=session).order_by("seq")


def transcript_for_step(*, tenant_id: str, session_id: Any) -> list[dict[str, Any]]:
    """The conversation as the engine hands it to a step."""
    with tenant_scope(tenant_id):
        rows = Message.objects.for_tenant(tenant_id).filter(session_id=session_id).order_by("seq")
        return [
            {
                "seq": m.seq,
                "role": m.role,
                "content": m.content,
                "tool_call": m.tool_call,
                "tool_result": m.tool_result,
            }
            for m in rows
        ]


# --- threads and packed contexts (agents/conversations/) ------------------------------------------


def session_forks(principal: Principal, session: AgentSession) -> QuerySet[AgentSession]:
    """Conversations forked from `session` that the principal may see, oldest first."""
    return sessions_for(principal).filter(parent=session).order_by("created_at")


def packed_contexts(run: Run) -> QuerySet[Any]:
    """What each step of the run packed for the model, in step order."""
    return PackedContext.objects.for_tenant(run.tenant_id).filter(run=run).order_by("seq", "index")


# --- the charts over time (the runs page and the console) ----------------------------------------


def run_counts_over_time(
    principal: Principal, *, since: dt.datetime, bucket: str
) -> list[tuple[dt.datetime, str, int]]:
    """(bucket start, status, runs) for the runs the principal may see that were created since
    `since`, by `bucket` ("hour" or "day", in the current time zone). One statement over the
    tenant's (tenant, status, created_at) index."""
    when = Trunc("created_at", bucket, tzinfo=timezone.get_current_timezone())
    rows = (
        runs_for(principal)
        .filter(created_at__gte=since)
        .select_related(None)
        .order_by()
        .annotate(bucket=when)
        .values_list("bucket", "status")
        # COUNT(*), not of a column: the (tenant, status, created_at) index answers alone.
        .annotate(n=Count("*"))
    )
    return [(start, status, n) for start, status, n in rows]


# How many runs a latency chart reads at most (a uniform sample above that): a busy tenant's
# week is 70,000 runs and 210,000 steps, and percentiles of 5,000 runs' steps tell the same.
LATENCY_SAMPLE_RUNS = 5000
_STEP_LATENCY_SQL = sql.load("agents.runtime", "step_latency_over_time")


@dataclass(frozen=True)
class Latency:
    rows: list[tuple[dt.datetime, float, float, int]]  # bucket start, p50 ms, p95 ms, steps
    runs: int  # runs created in the period
    sampled: float  # the share of them whose steps were read (1.0: all)


def step_latency_over_time(principal: Principal, *, since: dt.datetime, bucket: str) -> Latency:
    """p50 and p95 of the successful steps of the runs the principal may see that were created
    since `since`, by when the steps started (`bucket`: "hour" or "day", in the current time
    zone), from a sample of at most LATENCY_SAMPLE_RUNS runs. One statement."""
    if bucket not in ("hour", "day"):
        raise ValueError(f"no such bucket: {bucket!r}")
    if principal.sees_only_own and principal.user is None:
        return Latency([], 0, 1.0)  # nobody's own runs
    user = principal.user.pk if principal.sees_only_own and principal.user else None
    params: dict[str, Any] = {
        "tenant": principal.tenant.pk,
        "since": since,
        "user": user,
        "sample": LATENCY_SAMPLE_RUNS,
        "bucket": bucket,
        "tz": timezone.get_current_timezone_name(),
    }
    with connection.cursor() as cursor:
        cursor.execute(_STEP_LATENCY_SQL, params)
        found = cursor.fetchall()
    runs = int(found[0][4]) if found else 0
    rows = [(start, float(p50), float(p95), int(n)) for start, p50, p95, n, _ in found]
    return Latency(rows, runs, min(1.0, LATENCY_SAMPLE_RUNS / runs) if runs else 1.0)
