"""Runs recovered automatically: workers the recovery sweep found lost (their `lost` attempts
and `run.lost` events), the claims that picked their runs up again (`step.started` with
`recovered`), and what that means for an admin's action that meets such a run."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.db.models import Q
from django.utils import timezone

from agents.console import stuck
from agents.console.forms import WINDOWS, RecoveredFilterForm
from agents.console.selectors import shown_key, tenant_runs
from agents.runtime.models import AttemptOutcome, Run, RunEventLog, RunStatus, StepAttempt
from tenants.principal import Principal

RECOVERED_SHOWN = 50
# Events that mean a person acted on the run (an admin's repair, a cancel, a decision, a
# wake-up): after one of them a stale version is a real conflict, whatever else happened.
INTERVENTIONS = frozenset({"run.status", "run.queued", "approval.decided"})


@dataclass
class Recovered:
    """One worker lost by the recovery sweep, and the claim that picked its run up again."""

    run_id: Any
    agent: str
    step: str
    step_seq: int
    attempt: int
    worker: str  # the lost one ("host:pid")
    lost_at: dt.datetime
    recovered_at: dt.datetime | None = None  # None: still waiting for a worker
    recovered_by: str = ""

    @property
    def waited_s(self) -> float | None:
        if self.recovered_at is None:
            return None
        return (self.recovered_at - self.lost_at).total_seconds()


def recovering_count(principal: Principal) -> int:
    """Runs whose worker was lost and that wait for another one right now."""
    return tenant_runs(principal).filter(status=RunStatus.QUEUED, lost_at__isnull=False).count()


def recovered_runs(
    principal: Principal,
    *,
    now: dt.datetime,
    since: str = "day",
    worker: str = "",
    limit: int = RECOVERED_SHOWN,
) -> list[Recovered]:
    """Workers the recovery sweep found lost within the window (newest first), each with the
    claim that recovered its run: the `lost` attempts it recorded, paired with its `run.lost`
    event (an admin's force-release records a lost attempt too, but no such event) and the
    `step.started` event with `recovered` that followed."""
    attempts = StepAttempt.objects.for_tenant(principal.tenant).filter(
        outcome=AttemptOutcome.LOST, ended_at__gte=now - WINDOWS[since][1]
    )
    if worker:
        attempts = attempts.filter(Q(worker=worker) | Q(worker__startswith=f"{worker}:"))
    lost = list(attempts.order_by("-ended_at", "-id")[:limit])
    if not lost:
        return []
    run_ids = {a.run_id for a in lost}
    agents = dict(tenant_runs(principal).filter(pk__in=run_ids).values_list("pk", "agent"))
    events = (
        RunEventLog.objects.for_tenant(principal.tenant)
        .filter(run_id__in=run_ids, kind__in=["run.lost", "step.started"])
        .filter(created_at__gte=min(a.ended_at for a in lost))
        .order_by("seq")
    )
    by_run: dict[Any, list[RunEventLog]] = {}
    for event in events:
        by_run.setdefault(event.run_id, []).append(event)
    found = []
    for a in lost:
        row = _recovered(a, by_run.get(a.run_id, []), agents.get(a.run_id, ""))
        if row is not None:
            found.append(row)
    return found


def _recovered(attempt: StepAttempt, events: list[RunEventLog], agent: str) -> Recovered | None:
    def about(e: RunEventLog) -> bool:
        data = e.data or {}
        return (
            data.get("step_seq") == attempt.seq
            and data.get("attempt") in (None, attempt.attempt)
            and e.created_at >= attempt.ended_at
        )

    announced = next((e for e in events if e.kind == "run.lost" and about(e)), None)
    if announced is None:
        return None  # not the sweep's: an admin released the lease
    claims = (e for e in events if e.kind == "step.started" and e.seq > announced.seq)
    claim = next((e for e in claims if (e.data or {}).get("recovered")), None)
    return Recovered(
        run_id=attempt.run_id,
        agent=agent,
        step=attempt.step,
        step_seq=attempt.seq,
        attempt=attempt.attempt,
        worker=attempt.worker,
        lost_at=attempt.ended_at,
        recovered_at=claim.created_at if claim else None,
        recovered_by=str((claim.data or {}).get("worker", "")) if claim else "",
    )


def recovered_key(rows: list[Recovered], recovering: int) -> str:
    return shown_key(
        [recovering, *((str(r.run_id), r.step_seq, r.attempt, r.recovered_by) for r in rows)]
    )


def recovered_context(
    principal: Principal, filters: RecoveredFilterForm, now: dt.datetime
) -> tuple[dict[str, Any], int]:
    """What the recovered history shows for these filters, and the status code it deserves."""
    context: dict[str, Any] = {
        "recovered_form": filters,
        "recovered": [],
        "recovered_limit": RECOVERED_SHOWN,
        "now": now,
    }
    data = filters.applied()  # a bad filter is not applied (the form says so)
    rows = recovered_runs(principal, now=now, since=data["since"], worker=data["worker"])
    recovering = recovering_count(principal)
    context.update(
        recovered=rows,
        recovering=recovering,
        recovered_window=WINDOWS[data["since"]][0],
        recovered_worker=data["worker"],
        recovered_filter=urlencode({**filters.kept(), "shown": recovered_key(rows, recovering)}),
    )
    return context, 200 if filters.is_valid() else 400


def recovered_since(run: Run, *, seen: int | None, now: dt.datetime) -> Recovered | None:
    """Why `run` moved on since an admin's page showed its event `seen`, if the reason is an
    automatic recovery: its worker was lost after that (and another picked it up, or will),
    nobody acted on the run since, and it is not stuck now. None: a real conflict."""
    if seen is None or seen >= run.event_seq:
        return None
    events = list(
        RunEventLog.objects.for_tenant(run.tenant_id)
        .filter(run=run, seq__gt=seen)
        .order_by("seq")[:1000]
    )
    if any(e.kind in INTERVENTIONS for e in events):
        return None
    announced = [e for e in events if e.kind == "run.lost"]
    if not announced or stuck.diagnose(run, now):
        return None
    last = announced[-1]
    data = last.data or {}
    claim = next(
        (e for e in events if e.seq > last.seq and e.kind == "step.started"),
        None,
    )
    lost_at = data.get("lost_at")
    return Recovered(
        run_id=run.pk,
        agent=run.agent,
        step=str(data.get("step", "")),
        step_seq=int(data.get("step_seq") or 0),
        attempt=int(data.get("attempt") or 0),
        worker=str(data.get("worker", "")),
        lost_at=dt.datetime.fromisoformat(lost_at) if lost_at else last.created_at,
        recovered_at=claim.created_at if claim else None,
        recovered_by=str((claim.data or {}).get("worker", "")) if claim else "",
    )


# Actions that change a run rather than repair it: after an automatic recovery they may
# still be wanted, on the run as it is now.
CHANGES_NOT_REPAIRS = frozenset({"cancel", "state", "replay"})


def recovered_notice(recovered: Recovered, action: str = "") -> str:
    """What an admin is told when their action met a run recovered automatically since
    their page showed it (the action did nothing: the version they saw is gone)."""
    if recovered.recovered_at is None:
        lost = timezone.localtime(recovered.lost_at).strftime("%H:%M:%S")
        text = (
            f"Already recovering automatically: worker {recovered.worker} was lost (last seen "
            f"alive at {lost}) "
            "and another worker continues from the last checkpoint — no action needed."
        )
    else:
        at = timezone.localtime(recovered.recovered_at).strftime("%H:%M:%S")
        by = f" by {recovered.recovered_by}" if recovered.recovered_by else ""
        text = f"Already recovered automatically at {at}{by} — no action needed."
    if action in CHANGES_NOT_REPAIRS:
        text += " Nothing was changed; do it again on the run as it is now if you still want to."
    return text
