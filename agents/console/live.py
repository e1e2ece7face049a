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

from django.conf import settings
from django.http import QueryDict
from django.template.loader import render_to_string
from django.utils import timezone

from agents.console import recovered, selectors
from agents.console.forms import WINDOWS, ConsoleFilterForm, RecoveredFilterForm
from agents.runtime import selectors as runtime_selectors
from agents.runtime.models import AttemptOutcome, StepAttempt
from core.recent import Recent
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
        summary = summary_for(principal, event, now)
    messages = []
    if rows:  # upserts (static/js/live.js): rows shown are replaced, a new one goes on top
        html = "".join(render_to_string(f"{RUNS}#console-row", {"run": run}) for run in rows)
        messages.append(f'<tbody hx-swap-oob="afterbegin:#console-tbody">{html}</tbody>')
    messages.append(render_to_string(f"{RUNS}#console-summary", summary))
    return messages


# Every admin socket of a tenant renders the same event: the counts by status are read once
# per event in this process (exact: read after the event's commit); the counts by stuck reason
# (which also change with the clock alone, and cost a scan of the open runs) once per
# AGENTSTATE_LIVE_STUCK_COUNTS_SECONDS per tenant, so a live card may lag that long behind.
# A page's first draw and a (re)subscribe read both afresh.
_stuck_by_tenant: Recent[dict[str, Any]] = Recent(seconds=5.0)


def summary_for(principal: Principal, event: dict[str, Any] | None, now: Any) -> dict[str, Any]:
    """The console's cards: counts by status and by stuck reason (see above)."""
    tenant = principal.tenant.pk
    if event is None:
        card = selectors.stuck_card(principal, now)
        _stuck_by_tenant.put(tenant, card)  # kept for the events that follow
        return {"counts": runtime_selectors.status_counts(principal), **card}
    card = _stuck_by_tenant.get(
        tenant,
        lambda: selectors.stuck_card(principal, now),
        seconds=settings.AGENTSTATE_LIVE_STUCK_COUNTS_SECONDS,
    )
    return {"counts": runtime_selectors.tenant_status_counts_after(tenant, event), **card}


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
