"""Reads of the admin console. Every read names its tenant (the admin's)."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from agents.console import stuck
from agents.console.diff import Change, state_diff
from agents.console.forms import AGES
from agents.presenters import pages
from agents.runtime import graph_runs
from agents.runtime.definitions import get_agent
from agents.runtime.errors import AppError
from agents.runtime.models import AgentSession, Checkpoint, Run, RunStatus
from core.paging import NEWEST_FIRST, paginate, position_encode
from tenants.principal import Principal

PAGE_SIZE = 25  # like the approvals inbox: a page renders in well under 50 ms
CHECKPOINTS_SHOWN = 100


def tenant_runs(principal: Principal) -> QuerySet[Run]:
    return Run.objects.for_tenant(principal.tenant)


@dataclass
class RunsPage:
    runs: list[Run]
    next_cursor: str | None


def runs_page(
    principal: Principal,
    *,
    now: dt.datetime,
    status: str = "",
    agent: str = "",
    reason: str = "",
    age: str = "",
    user: str = "",
    before: tuple[dt.datetime, Any] | None = None,
    limit: int = PAGE_SIZE,
) -> RunsPage:
    """One page of the tenant's runs, newest first, by keyset: (created_at, id) < cursor."""
    runs = _filtered(principal, now, status, agent, reason, age, user)
    runs = runs.select_related("created_by", "session__user")
    page = paginate(runs, order=NEWEST_FIRST, after=before, limit=limit)
    last = page.last
    cursor = position_encode(last.created_at, last.pk) if last is not None else None
    found = stuck.reasons_in_python(page.rows, now)
    for run in page.rows:
        run.stuck_reasons = found[run.pk]  # type: ignore[attr-defined]
    pages.dress_runs(page.rows, now)
    for run in page.rows:
        # The row's cells up to its step, kept ({% kept %}, core/fragments.py) under every
        # value they show: a run changed by any path gets a new key.
        run.console_row_key = (  # type: ignore[attr-defined]
            *pages.shown_state(run),
            run.version,
            run.event_seq,
            run.resolved_at,
            run.what,  # type: ignore[attr-defined]
            run.outcome,  # type: ignore[attr-defined]
            tuple((r.label, r.explanation) for r in run.stuck_reasons),  # type: ignore[attr-defined]
        )
    return RunsPage(page.rows, cursor)


def _filtered(
    principal: Principal,
    now: dt.datetime,
    status: str,
    agent: str,
    reason: str,
    age: str,
    user: str,
) -> QuerySet[Run]:
    runs = tenant_runs(principal)
    if status:
        runs = runs.filter(status=status)
    if agent:
        runs = runs.filter(agent=agent)
    if reason == "any":
        runs = runs.filter(stuck.stuck_q(now))
    elif reason:
        runs = runs.filter(stuck.reason_q(reason, now))
    if age == "lt1h":
        runs = runs.filter(created_at__gte=now - dt.timedelta(hours=1))
    elif age:
        runs = runs.filter(created_at__lt=now - AGES[age][1])
    if user:
        runs = runs.filter(_of_user(principal, user))
    return runs


def _of_user(principal: Principal, username: str) -> Q:
    """Runs an end user started, or that ran in their conversations."""
    found = get_user_model().objects.filter(username=username).values_list("pk", flat=True)
    user_id = next(iter(found), None)
    if user_id is None:
        return Q(pk__in=[])
    sessions = AgentSession.objects.for_tenant(principal.tenant).filter(user_id=user_id)
    return Q(created_by_id=user_id) | Q(session_id__in=sessions.values("pk"))


def stuck_counts(principal: Principal, now: dt.datetime) -> list[dict[str, Any]]:
    """The tenant's stuck runs by reason, counted now (a scan of its open runs)."""
    return _by_reason_rows(stuck.tenant_counts(tenant_runs(principal), now))


def _by_reason_rows(counts: dict[str, int]) -> list[dict[str, Any]]:
    return [{"reason": stuck.REASONS[code], "count": n} for code, n in counts.items()]


def stuck_card(principal: Principal, now: dt.datetime) -> dict[str, Any]:
    """What the console's stuck card shows: the counts as the stuck sweep last stored them
    (one indexed read, at most one sweep interval old, with when they were counted), or
    counted now when no sweep stored any lately (stuck.stored_counts)."""
    stored = stuck.stored_counts(principal.tenant.pk)
    if stored is None:
        return {"stuck_counts": stuck_counts(principal, now), "stuck_counted_at": None}
    counts, counted_at = stored
    return {"stuck_counts": _by_reason_rows(counts), "stuck_counted_at": counted_at}


# --- what a live page shows -----------------------------------------------------------------------


def shown_key(parts: Iterable[Any]) -> str:
    """A short fingerprint of what a live part of the page shows, sent back when its socket
    subscribes (`shown=` in its filter): the feed sends the part again only if it differs,
    so a subscription never overwrites what the page just loaded (or a newer filter's
    rows), and a reconnect still catches up."""
    return hashlib.sha256(repr(list(parts)).encode()).hexdigest()[:16]


def rows_key(runs: list[Run]) -> str:
    """What a page of the console's rows shows changes with each run's version or event."""
    return shown_key((str(r.pk), r.version, r.event_seq) for r in runs)


# --- one run --------------------------------------------------------------------------------------


@dataclass
class CheckpointView:
    checkpoint: Checkpoint
    changes: list[Change]
    state_json: str


def checkpoints(run: Run) -> list[CheckpointView]:
    """The latest checkpoints, oldest first, each with what changed since the one before."""
    found = list(
        Checkpoint.objects.for_tenant(run.tenant_id)
        .filter(run=run)
        .order_by("-seq")[: CHECKPOINTS_SHOWN + 1]
    )[::-1]
    views, previous = [], None
    for i, cp in enumerate(found):
        if i == 0 and len(found) > CHECKPOINTS_SHOWN:
            previous = cp.state  # only the base of the first diff shown
            continue
        views.append(
            CheckpointView(cp, state_diff(previous or {}, cp.state), pages.pretty(cp.state))
        )
        previous = cp.state
    return views


def run_console(run: Run, *, now: dt.datetime) -> dict[str, Any]:
    """Everything the console's run page shows."""
    run_approvals = pages.approvals(run)
    cps = checkpoints(run)
    latest = next((c for c in reversed(cps) if c.checkpoint.seq == run.step_seq), None)
    return {
        "run": run,
        "reasons": stuck.diagnose(run, now),
        "progress": pages.progress(run),
        "error_detail": pages.error_detail(run.error),
        "steps": pages.steps(run),
        "checkpoints": cps,
        "replay_points": [0, *[c.checkpoint.seq for c in cps if c.checkpoint.next_step]],
        "state_json": latest.state_json if latest else "{}",
        "tool_calls": pages.tool_calls(run),
        "approvals": run_approvals,
        "audit": pages.audit_trail(run, run_approvals),
        "transcript": pages.messages(run),
        **pages.io_context(run),
        "has_schema": _has_schema(run),
        "can": available_actions(run, now),
        "now": now,
    }


def _has_schema(run: Run) -> bool:
    try:
        return get_agent(run.agent).state_schema is not None
    except AppError:
        return False


def available_actions(run: Run, now: dt.datetime) -> dict[str, bool]:
    """Which buttons the page offers (the actions check again, fenced, when pressed). A
    LangGraph thread's run is driven by its own process: none that drive a run apply."""
    if graph_runs.is_graph_run(run):
        return {
            "resume": False,
            "retry": False,
            "release": False,
            "cancel": False,
            "edit": False,
            "replay": False,
            "graph": True,
        }
    running = run.status == RunStatus.RUNNING
    lease_gone = running and (not run.lease_owner or (run.lease_expires_at or now) <= now)
    backing_off = (
        run.status == RunStatus.QUEUED and run.not_before is not None and run.not_before > now
    )
    return {
        "resume": lease_gone or run.status in (RunStatus.QUEUED, RunStatus.WAITING_TIMER),
        "retry": run.status == RunStatus.FAILED or backing_off,
        "release": running,
        "cancel": not run.is_finished and not run.cancel_requested,
        "edit": not running or lease_gone,
        "replay": True,
        "graph": False,
    }
