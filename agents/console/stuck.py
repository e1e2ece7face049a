"""Stuck runs: which runs need a person, why in plain words, and what to do about it.

Each reason is one condition on `agents_run` that an index serves (status first, or the
tenant then status); `stuck_q()` ORs them for the console's filter and the beat job, and
`annotate()` adds one boolean per reason to a page of runs so each row can say why.
A run an admin marked resolved drops out until the run changes again (`updated_at`).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

import redis.exceptions
from django.conf import settings
from django.db.models import (
    BooleanField,
    Count,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.functions import Coalesce, Greatest
from django.db.models.lookups import LessThan
from django.utils import timezone

from agents.runtime import graph_runs
from agents.runtime.definitions import all_agents
from agents.runtime.metrics import record_sweep
from agents.runtime.models import FINISHED, Run, RunStatus, StuckCount
from approvals.models import ApprovalRequest, ApprovalStatus
from core.redis_client import client as redis_client
from tenants.scope import system_scope

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reason:
    code: str
    label: str
    explanation: str  # plain words, for the admin
    action: str  # the console action that usually fixes it
    advice: str


REASONS: dict[str, Reason] = {
    r.code: r
    for r in [
        Reason(
            "lease_expired",
            # Not "Worker lost": that is a run the sweep took back (the recovery history).
            "Lease expired, not yet taken back",
            "The worker running this step stopped answering: its lease expired, so it most "
            "likely crashed, was killed or lost its network.",
            "resume",
            "Resume it: another worker continues from the last checkpoint (recorded side "
            "effects are not repeated).",
        ),
        Reason(
            "retries_exhausted",
            "Retries used up",
            "The step kept failing with temporary errors (rate limits, timeouts, 5xx) until "
            "its retry budget ran out, so the run failed.",
            "retry",
            "Check the last attempt's error; once the cause is gone, retry the failed step.",
        ),
        Reason(
            "approval_overdue",
            "Approval overdue",
            "The run is waiting for a person to approve or reject, and the request is past "
            "its deadline.",
            "cancel",
            "Ask an approver to decide it in the approvals inbox, or cancel the run.",
        ),
        Reason(
            "timer_overdue",
            "Timer overdue",
            "The run was sleeping until a time that has passed (plus a grace period), but "
            "nothing woke it: the beat scheduler may not be running.",
            "resume",
            "Resume it now, and check that Celery beat is running.",
        ),
        Reason(
            "queued_too_long",
            "Not picked up",
            "The run has been queued for longer than the threshold and no worker took it: "
            "no worker may be consuming the queue.",
            "resume",
            "Check /readyz for live workers, then resume it to queue it again.",
        ),
        Reason(
            "graph_silent",
            "Graph silent",
            "This LangGraph thread has nodes left to run, but its process has saved no "
            "checkpoint for a while: it may have been killed, or a node may hang. Its graph "
            "runs in that process, so AgentState cannot retry or cancel it.",
            "",
            "Check the process that runs the graph. If it died, invoke the graph again on "
            "this thread: it continues from its last checkpoint. Otherwise delete the thread, "
            "or mark this resolved.",
        ),
        Reason(
            "code_missing",
            "Code missing",
            "The agent, its current step or its state version no longer exists in the "
            "deployed code, so no worker can run it.",
            "cancel",
            "Deploy the missing agent version (or a state migration) and retry, or edit the "
            "state, replay from a checkpoint, or cancel the run.",
        ),
    ]
}

# Failures that mean the code the run needs is not deployed.
CODE_ERRORS = ("unknown_agent", "unknown_step", "state_migration_failed")


def _graph_silence() -> dt.timedelta:
    return dt.timedelta(seconds=settings.AGENTSTATE_STUCK_GRAPH_SILENT_SECONDS)


def _timer_grace() -> dt.timedelta:
    return dt.timedelta(seconds=settings.AGENTSTATE_STUCK_TIMER_GRACE_SECONDS)


def _queued_limit() -> dt.timedelta:
    return dt.timedelta(seconds=settings.AGENTSTATE_STUCK_QUEUED_SECONDS)


def _unresolved() -> Q:
    return Q(resolved_at__isnull=True) | Q(resolved_at__lt=F("updated_at"))


def _approval_overdue(now: dt.datetime) -> Exists:
    return Exists(
        ApprovalRequest.objects.filter(
            run_id=OuterRef("pk"), status=ApprovalStatus.PENDING, due_at__lt=now
        )
    )


def _queued_since() -> Greatest:
    # When the run entered the queue (queued_at, kept by the database on every write that
    # queues it), or the time it was due if that is later (a retry's backoff).
    return Greatest(
        Coalesce(F("not_before"), F("created_at")),
        Coalesce(F("queued_at"), F("created_at")),
        output_field=DateTimeField(),
    )


def _code_missing() -> Q:
    """Runs that need code this deployment does not have."""
    known = Q(agent=graph_runs.AGENT)  # its steps are the graph's nodes, run elsewhere
    for agent in all_agents():
        known |= (
            Q(agent=agent.name, current_step__in=list(agent.steps))
            & Q(agent_version__lte=agent.version)
            & Q(state_schema_version__lte=agent.state_version)
            & Q(state_schema_version__gte=_oldest_migratable(agent))
        )
    active = ~Q(status__in=FINISHED) & ~known
    failed = Q(status=RunStatus.FAILED, error__code__in=CODE_ERRORS)
    return active | failed


def _oldest_migratable(agent) -> int:
    version = agent.state_version
    while version - 1 in agent.migrations:
        version -= 1
    return version


def conditions(now: dt.datetime) -> dict[str, Q]:
    """The condition of each reason (without the resolved check)."""
    # A graph's run is stuck only when its process fell silent (never while it waits).
    ours = ~Q(agent=graph_runs.AGENT)
    return {
        "lease_expired": Q(status=RunStatus.RUNNING, lease_expires_at__lt=now),
        "retries_exhausted": Q(status=RunStatus.FAILED, error__code="retries_exhausted"),
        "approval_overdue": Q(status=RunStatus.WAITING_APPROVAL) & ours & Q(_approval_overdue(now)),
        "timer_overdue": Q(status=RunStatus.WAITING_TIMER, not_before__lt=now - _timer_grace()),
        "queued_too_long": Q(status=RunStatus.QUEUED, created_at__lt=now - _queued_limit())
        & Q(LessThan(_queued_since(), now - _queued_limit())),
        "graph_silent": Q(
            status=RunStatus.RUNNING,
            agent=graph_runs.AGENT,
            updated_at__lt=now - _graph_silence(),
        ),
        "code_missing": _code_missing(),
    }


def reason_q(code: str, now: dt.datetime) -> Q:
    """Runs stuck for reason `code` (and not marked resolved since they last changed)."""
    return conditions(now)[code] & _unresolved()


def stuck_q(now: dt.datetime) -> Q:
    """Runs stuck for any reason."""
    found = Q(pk__in=[])
    for condition in conditions(now).values():
        found |= condition
    return found & _unresolved()


def annotate(runs: QuerySet[Run], now: dt.datetime) -> QuerySet[Run]:
    """Add `stuck_<code>` booleans; PostgreSQL computes them only for the rows returned."""
    unresolved = _unresolved()
    return runs.annotate(
        **{
            f"stuck_{code}": ExpressionWrapper(condition & unresolved, output_field=BooleanField())
            for code, condition in conditions(now).items()
        }
    )


def reasons_in_python(runs: list[Run], now: dt.datetime) -> dict[Any, list[Reason]]:
    """The reasons each of a page of runs is stuck, decided in Python from the rows plus two
    small batch reads (pending approvals, latest events). The same rules as `conditions()`
    (tests hold the two to agreement), without planning that large expression for a page."""
    if not runs:
        return {}
    tenant = runs[0].tenant_id
    waiting = [
        r.pk for r in runs if r.status == RunStatus.WAITING_APPROVAL and r.agent != graph_runs.AGENT
    ]
    overdue = set(
        ApprovalRequest.objects.for_tenant(tenant)
        .filter(run_id__in=waiting, status=ApprovalStatus.PENDING, due_at__lt=now)
        .values_list("run_id", flat=True)
        if waiting
        else []
    )
    known = {a.name: a for a in all_agents()}
    return {run.pk: _reasons(run, now, overdue, known) for run in runs}


def _reasons(run: Run, now: dt.datetime, overdue: set, known: dict) -> list[Reason]:
    if run.resolved_at is not None and run.resolved_at >= run.updated_at:
        return []
    code = (run.error or {}).get("code") if isinstance(run.error, dict) else None
    limit = now - _queued_limit()
    found = {
        "lease_expired": run.status == RunStatus.RUNNING
        and run.lease_expires_at is not None
        and run.lease_expires_at < now,
        "retries_exhausted": run.status == RunStatus.FAILED and code == "retries_exhausted",
        "approval_overdue": run.pk in overdue,
        "timer_overdue": run.status == RunStatus.WAITING_TIMER
        and run.not_before is not None
        and run.not_before < now - _timer_grace(),
        "queued_too_long": run.status == RunStatus.QUEUED
        and run.created_at < limit
        and max(run.not_before or run.created_at, run.queued_at or run.created_at) < limit,
        "graph_silent": run.status == RunStatus.RUNNING
        and run.agent == graph_runs.AGENT
        and run.updated_at < now - _graph_silence(),
        "code_missing": (run.status not in FINISHED and not _deployed(run, known.get(run.agent)))
        or (run.status == RunStatus.FAILED and code in CODE_ERRORS),
    }
    return [reason for c, reason in REASONS.items() if found[c]]


def _deployed(run: Run, agent: Any) -> bool:
    if run.agent == graph_runs.AGENT:
        return True  # its steps are the graph's nodes, run elsewhere
    return (
        agent is not None
        and run.current_step in agent.steps
        and run.agent_version <= agent.version
        and _oldest_migratable(agent) <= run.state_schema_version <= agent.state_version
    )


def reasons_of(run: Run) -> list[Reason]:
    """The reasons an annotated run is stuck, in the order of REASONS."""
    return [reason for code, reason in REASONS.items() if getattr(run, f"stuck_{code}", False)]


def diagnose(run: Run, now: dt.datetime) -> list[Reason]:
    """The reasons one run is stuck (one query)."""
    annotated = annotate(Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk), now).first()
    return reasons_of(annotated) if annotated is not None else []


def counts(runs: QuerySet[Run], now: dt.datetime) -> dict[str, int]:
    """How many of `runs` are stuck for each reason (one query per reason, each indexed:
    across tenants, where each reason's status is a small slice of a huge table)."""
    return {code: runs.filter(reason_q(code, now)).count() for code in REASONS}


def tenant_counts(runs: QuerySet[Run], now: dt.datetime) -> dict[str, int]:
    """The same for one tenant's runs, in one query: only runs that are not succeeded or
    cancelled can be stuck, and the (tenant, status) index finds those."""
    candidates = runs.exclude(status__in=[RunStatus.SUCCEEDED, RunStatus.CANCELLED])
    found = candidates.filter(_unresolved()).aggregate(
        **{code: Count("pk", filter=cond) for code, cond in conditions(now).items()}
    )
    return {code: found[code] for code in REASONS}


# The sweep's counts are stored per tenant (agents_stuckcount) and this key says when they
# were last stored; pages read them while the key lives (COUNTED_FOR), so a card is at most
# one sweep interval (plus the sweep's own time) behind. Without it (beat down, Redis down,
# never counted), pages count afresh.
COUNTED_KEY = "agentstate:stuck-counted-at"


def counted_for() -> float:
    """How long stored counts stay good without a newer sweep: three intervals, at least a
    minute."""
    return max(3 * settings.CELERY_BEAT_SCHEDULE["detect-stuck-runs"]["schedule"], 60.0)


def count_by_tenant(now: dt.datetime) -> dict[Any, dict[str, int]]:
    """Stuck runs of every tenant by reason (one query per reason, each indexed), only the
    tenants and reasons with some."""
    found: dict[Any, dict[str, int]] = {}
    for code in REASONS:
        rows = (
            Run.objects.filter(reason_q(code, now))
            .order_by()
            .values_list("tenant_id")
            .annotate(n=Count("pk"))
        )
        for tenant_id, n in rows:
            found.setdefault(tenant_id, {})[code] = n
    return found


def _store(by_tenant: dict[Any, dict[str, int]], now: dt.datetime) -> None:
    # Called in the sweep's system scope: replaced in its transaction, so a page reads the
    # last sweep's rows or this one's, never a mix.
    StuckCount.objects.all().delete()
    StuckCount.objects.bulk_create(
        StuckCount(tenant_id=tenant_id, reason=code, n=n, counted_at=now)
        for tenant_id, by_reason in by_tenant.items()
        for code, n in by_reason.items()
    )


def _mark_counted(now: dt.datetime) -> None:
    try:
        redis_client().set(COUNTED_KEY, now.isoformat(), ex=max(1, round(counted_for())))
    except redis.exceptions.RedisError:
        logger.warning("could not mark the stuck counts stored", exc_info=True)


def _counted_mark() -> dt.datetime | None:
    """When the last sweep stored counts, while its mark lives; None otherwise (or Redis down)."""
    try:
        marked = redis_client().get(COUNTED_KEY)
    except redis.exceptions.RedisError:
        return None
    return dt.datetime.fromisoformat(marked.decode()) if marked else None


def stored_counts(tenant_id: Any) -> tuple[dict[str, int], dt.datetime] | None:
    """The tenant's stuck runs by reason as the last sweep stored them, and when it counted;
    None when no sweep stored any within `counted_for()` (the caller counts afresh)."""
    marked = _counted_mark()
    if marked is None:
        return None
    rows = list(StuckCount.objects.for_tenant(tenant_id).values_list("reason", "n", "counted_at"))
    counted = rows[0][2] if rows else marked
    found = {code: 0 for code in REASONS}
    found.update({reason: n for reason, n, _ in rows if reason in found})
    return found, counted


def stored_totals() -> dict[str, int] | None:
    """Every tenant's stored counts summed by reason (in a system scope), or None as above."""
    if _counted_mark() is None:
        return None
    found = {code: 0 for code in REASONS}
    rows = StuckCount.objects.order_by().values_list("reason").annotate(total=Sum("n"))
    found.update({reason: total for reason, total in rows if reason in found})
    return found


def detect_stuck(*, listed: int = 100) -> dict[str, int]:
    """Count stuck runs by reason across tenants, store each tenant's counts for the pages,
    and log each stuck run (up to `listed`) with its ids."""
    now = timezone.now()
    with system_scope("stuck_detection"):
        by_tenant = count_by_tenant(now)
        by_reason = {
            code: sum(counts.get(code, 0) for counts in by_tenant.values()) for code in REASONS
        }
        _store(by_tenant, now)
        found = (
            list(
                Run.objects.filter(stuck_q(now))
                .order_by("updated_at")
                .values_list("id", "tenant_id", "status", "agent")[:listed]
            )
            if any(by_reason.values())
            else []
        )
    for run_id, tenant_id, status, agent in found:
        logger.warning(
            "stuck run: %s run is %s",
            agent,
            status,
            extra={"tenant_id": str(tenant_id), "run_id": str(run_id), "event": "run.stuck"},
        )
    _mark_counted(now)
    if any(by_reason.values()):
        logger.warning("stuck runs: %s", by_reason, extra={"event": "runs.stuck", **by_reason})
    record_sweep("stuck_detection", by_reason)
    return by_reason
