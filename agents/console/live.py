"""The console's feeds of the live websocket (agents/live/): the runs console's rows and counts
(`console`), and its recovered history (`console_recovered`), rendered from the database with
the partials the HTTP views render.

A page subscribes with `{"type": "subscribe", "kind": "console", "filter": <the runs filter's
query string>}` and `{"type": "subscribe", "kind": "console_recovered", "filter": "since=hour&
worker=..."}`. Admins only, like the pages: anyone else hears nothing. Each feed is asked
about every committed event of the admin's tenant (the consumer never hands it another
tenant's); it answers [] for what the page does not show.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import QueryDict
from django.template.loader import render_to_string
from django.utils import timezone

from agents.console import recovered, selectors
from agents.console.forms import WINDOWS, ConsoleFilterForm, RecoveredFilterForm
from agents.runtime.models import AttemptOutcome, StepAttempt
from tenants.models import Scope
from tenants.principal import Principal
from tenants.scope import tenant_scope

RUNS = "agents/console/runs.html"


def console_feed(
    principal: Principal, event: dict[str, Any] | None, page: str | None = None
) -> list[str]:
    """The rows of the console's list that changed (the run of `event`, if the page shows it,
    or a run that now belongs at its top) and the counts; on subscribe (`event` None), the
    counts, and every row of the page unless the page shows them as they are (`shown`)."""
    if not principal.can(Scope.ADMIN):
        return []
    run_id = _run_id(event)
    if event is not None and run_id is None:
        return []
    query = QueryDict(page or "")
    filters = ConsoleFilterForm(query)
    now = timezone.now()
    with tenant_scope(principal.tenant.pk, user_id=getattr(principal.user, "pk", None)):
        rows = _page(principal, filters, now)
        if run_id is not None:
            rows = [run for run in rows if run.pk == run_id]
        elif query.get("shown") == selectors.rows_key(rows):
            rows = []  # the page shows them as they are
        summary = {
            "counts": selectors.status_counts(principal),
            "stuck_counts": selectors.stuck_counts(principal, now),
        }
    messages = []
    if rows:  # upserts (static/js/live.js): rows shown are replaced, a new one goes on top
        html = "".join(render_to_string(f"{RUNS}#console-row", {"run": run}) for run in rows)
        messages.append(f'<tbody hx-swap-oob="afterbegin:#console-tbody">{html}</tbody>')
    messages.append(render_to_string(f"{RUNS}#console-summary", summary))
    return messages


def _page(principal: Principal, filters: ConsoleFilterForm, now: Any) -> list:
    data = filters.applied()
    return selectors.runs_page(
        principal,
        now=now,
        status=data["status"],
        agent=data["agent"],
        reason=data["stuck"],
        age=data["age"],
        user=data["user"],
        before=data["before"],
    ).runs


def recovered_feed(
    principal: Principal, event: dict[str, Any] | None, page: str | None = None
) -> list[str]:
    """The recovered history for the page's filters, when `event` is about a run whose
    worker was lost within the window (its run.lost, the claim that recovered it, or what
    came next), and on subscribe if it changed since the page showed it (`shown`)."""
    if not principal.can(Scope.ADMIN):
        return []
    run_id = _run_id(event)
    filters = RecoveredFilterForm(QueryDict(page or ""))
    now = timezone.now()
    with tenant_scope(principal.tenant.pk, user_id=getattr(principal.user, "pk", None)):
        # The sender keeps only a run's newest message, so the run.lost or the recovering
        # claim may reach us as a later event: ask the database, not the event's kind.
        if event is not None and not (
            run_id is not None and _lost_within(principal, run_id, filters, now)
        ):
            return []
        context, _ = recovered.recovered_context(principal, filters, now)
    if event is None and context["recovered_filter"] == page:
        return []  # on subscribe: the page shows it as it is
    return [render_to_string(f"{RUNS}#recovered-list", context)]


def _lost_within(principal: Principal, run_id: uuid.UUID, filters: Any, now: Any) -> bool:
    window = WINDOWS[filters.applied()["since"]][1]
    return (
        StepAttempt.objects.for_tenant(principal.tenant)
        .filter(run_id=run_id, outcome=AttemptOutcome.LOST, ended_at__gte=now - window)
        .exists()
    )


def _run_id(event: dict[str, Any] | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(event["run_id"])) if event else None
    except (KeyError, ValueError):
        return None
