"""Pages of the admin console: the runs list with stuck runs, one run, and its actions.

Admins only (403 for every other role); another tenant's run is a 404. Every action posts
the run's version; if the run changed meanwhile the answer is 409 with the page as it is now,
unless what changed it was an automatic recovery from a lost worker (then a 200 saying no
action is needed, with the page as it is now).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from agents.console import bulk, recovered, selectors
from agents.console.forms import (
    BulkForm,
    ConsoleFilterForm,
    RecoveredFilterForm,
    ReplayForm,
    ResolveForm,
    StateForm,
    VersionForm,
)
from agents.presenters import trends
from agents.runtime import repairs as actions
from agents.runtime import selectors as runtime_selectors
from agents.runtime import services
from agents.runtime.errors import InvalidState, RunChanged
from agents.runtime.models import Run
from core.errors import AppError
from core.htmx import is_partial, render_fragments, vary_on_htmx
from tenants.models import Scope
from tenants.permissions import require_scope
from tenants.principal import Principal
from tenants.replica import lag_tolerant

RUNS = "agents/console/runs.html"
RUN = "agents/console/run.html"


def get_run_for_admin(request: HttpRequest, run_id: uuid.UUID) -> Run:
    """The run of the admin's tenant, or 404 (other tenants' runs do not exist here)."""
    try:
        return selectors.tenant_runs(request.principal).get(pk=run_id)  # type: ignore[attr-defined]
    except (Run.DoesNotExist, ValueError):
        raise Http404 from None


# --- the runs list --------------------------------------------------------------------------------


@require_GET
@require_scope(Scope.ADMIN)
@lag_tolerant
def run_list(request: HttpRequest) -> HttpResponse:
    """Runs of the tenant with filters (status, agent, stuck reason, age, end user), and the
    runs recovered automatically (filtered by `since` and `worker`)."""
    principal = request.principal  # type: ignore[attr-defined]
    context, status = _table(principal, ConsoleFilterForm(request.GET))
    if is_partial(request):  # the table, and the filter form saying what it did not apply
        parts = [f"{RUNS}#console-table", f"{RUNS}#console-filters"]
        return vary_on_htmx(render_fragments(request, parts, context, status=status))
    history, history_status = recovered.recovered_context(
        principal, RecoveredFilterForm(request.GET), timezone.now()
    )
    context.update(history, counts=None, stuck_counts=None)
    return vary_on_htmx(render(request, RUNS, context, status=max(status, history_status)))


@require_GET
@require_scope(Scope.ADMIN)
def run_recovered(request: HttpRequest) -> HttpResponse:
    """The recovered history for its filters (the console's list swaps it in); without htmx,
    the console page showing it."""
    if not is_partial(request):
        query = request.GET.urlencode()
        return redirect(reverse("console:console_runs") + (f"?{query}" if query else ""))
    context, status = recovered.recovered_context(
        request.principal,  # type: ignore[attr-defined]
        RecoveredFilterForm(request.GET),
        timezone.now(),
    )
    parts = [f"{RUNS}#recovered-list", f"{RUNS}#recovered-filters"]
    return render_fragments(request, parts, context, status=status)


@require_GET
@require_scope(Scope.ADMIN)
def run_summary(request: HttpRequest) -> HttpResponse:
    """The counts by status and by stuck reason, which the list page loads after itself: they
    read every run of the tenant, so the list never waits for them."""
    principal = request.principal  # type: ignore[attr-defined]
    context = {
        "counts": runtime_selectors.status_counts(principal),
        **selectors.stuck_card(principal, timezone.now()),
    }
    return render(request, f"{RUNS}#console-summary", context)


@require_GET
@require_scope(Scope.ADMIN)
def run_charts(request: HttpRequest) -> HttpResponse:
    """Runs over time by status and step latency over time, which the list page loads after
    itself (like the counts); without htmx, the console page for the same period."""
    return trends.charts_card(
        request,
        page="console:console_runs",
        charts="console:console_charts",
        dom_id="console-charts",
    )


def _table(principal: Principal, filters: ConsoleFilterForm) -> tuple[dict[str, Any], int]:
    data = filters.applied()  # a bad filter is not applied (the form says so)
    page = selectors.runs_page(
        principal,
        now=timezone.now(),
        status=data["status"],
        agent=data["agent"],
        reason=data["stuck"],
        age=data["age"],
        user=data["user"],
        before=data["before"],
    )
    keep = filters.kept()
    position = {**keep, **({"before": filters.data["before"]} if data["before"] else {})}
    here = urlencode(position)
    return {
        "filters": filters,
        "runs": page.runs,
        "older_url": "?" + urlencode({**keep, "before": page.next_cursor})
        if page.next_cursor
        else None,
        "newest_url": ("?" + urlencode(keep)) if data["before"] else None,
        "here": here,
        # what the live feed compares on subscribe (agents/console/live.py)
        "live_filter": urlencode({**position, "shown": selectors.rows_key(page.runs)}),
    }, 200 if filters.is_valid() else 400


@require_POST
@require_scope(Scope.ADMIN)
def run_bulk(request: HttpRequest) -> HttpResponse:
    """One action on the checked runs; each run succeeds or is refused on its own."""
    principal = request.principal  # type: ignore[attr-defined]
    form = BulkForm(request.POST)
    back = reverse("console:console_runs") + "?" + request.POST.get("here", "")
    if not form.is_valid():
        messages.error(request, "Choose an action and at least one run.")
        return redirect(back)
    items = form.cleaned_data["runs"]
    found = {r.pk: r for r in selectors.tenant_runs(principal).filter(pk__in=[i[0] for i in items])}
    pairs = [(found[pk], version) for pk, version, _ in items if pk in found]
    outcomes = bulk.runs_bulk(
        principal=principal,
        action=form.cleaned_data["action"],
        items=pairs,
        seen={pk: seen for pk, _, seen in items},
    )
    done = sum(o.ok for o in outcomes)
    label = dict(form.fields["action"].choices)[form.cleaned_data["action"]]
    messages.success(request, f"{label}: done for {done} of {len(items)} run(s).")
    for o in outcomes:
        if o.recovered is not None:
            messages.info(request, f"Run {o.run_id}: {recovered.recovered_notice(o.recovered)}")
        elif not o.ok:
            messages.warning(request, f"Run {o.run_id}: {o.message}")
    return redirect(back)


# --- one run --------------------------------------------------------------------------------------


@require_GET
@require_scope(Scope.ADMIN)
def run_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """The run for repair: why it is stuck, its timeline, checkpoints and diffs, actions."""
    run = get_run_for_admin(request, run_id)
    return vary_on_htmx(_render_run(request, run))


def _render_run(
    request: HttpRequest,
    run: Run,
    status: int = 200,
    *,
    notice: str = "",
    state_errors: list[str] | None = None,
    state_syntax: Any = None,
    state_draft: str | None = None,
    form_errors: str = "",
) -> HttpResponse:
    context = selectors.run_console(run, now=timezone.now())
    context.update(
        notice=notice,
        state_errors=state_errors or [],
        state_syntax=state_syntax,
        form_errors=form_errors,
        replay_form=ReplayForm(initial={"seq": run.step_seq}),
    )
    if state_draft is not None:
        context["state_json"] = state_draft
    template = f"{RUN}#console-run" if is_partial(request) else RUN
    return render(request, template, context, status=status)


Action = Callable[[Principal, Run, dict[str, Any]], Run]

ACTIONS: dict[str, tuple[type[VersionForm], Action, str]] = {
    "retry": (
        VersionForm,
        lambda p, r, d: actions.run_retry(principal=p, run=r, version=d["version"]),
        "The failed step runs again.",
    ),
    "resume": (
        VersionForm,
        lambda p, r, d: actions.run_resume(principal=p, run=r, version=d["version"]),
        "Resumed: the run is queued for a worker.",
    ),
    "cancel": (
        VersionForm,
        lambda p, r, d: services.run_cancel(principal=p, run=r, version=d["version"]),
        "Cancelled (a step in progress finishes first).",
    ),
    "release": (
        VersionForm,
        lambda p, r, d: actions.run_release_lease(principal=p, run=r, version=d["version"]),
        "Lease released: the run is queued for another worker.",
    ),
    "resolve": (
        ResolveForm,
        lambda p, r, d: actions.run_resolve(
            principal=p, run=r, version=d["version"], note=d["note"]
        ),
        "Marked resolved.",
    ),
    "state": (
        StateForm,
        lambda p, r, d: actions.run_edit_state(
            principal=p, run=r, version=d["version"], state=d["state"]
        ),
        "State saved.",
    ),
    "replay": (
        ReplayForm,
        lambda p, r, d: actions.run_replay(
            principal=p,
            run=r,
            version=d["version"],
            seq=d["seq"],
            as_new_run=d["mode"] == "new",
            repeat_side_effects=d["repeat_side_effects"],
        ),
        "Replaying from the checkpoint.",
    ),
}


@require_POST
@require_scope(Scope.ADMIN)
def run_action(request: HttpRequest, run_id: uuid.UUID, action: str) -> HttpResponse:
    """Apply one action; 409 with a fresh view if the run changed (unless it only recovered
    from a lost worker automatically: then a notice and the fresh view), 400 if the input
    is bad."""
    if action not in ACTIONS:
        raise Http404
    run = get_run_for_admin(request, run_id)
    form_class, apply, done = ACTIONS[action]
    form = form_class(request.POST)
    if not form.is_valid():
        if "state" in form.errors:  # said beside the editor, like its JSON
            draft = form.data.get("state", "")
            return _render_run(
                request, run, 400, state_errors=form.errors["state"], state_draft=draft
            )
        return _render_run(request, run, 400, form_errors=_form_problems(form))
    try:
        result = apply(request.principal, run, form.cleaned_data)  # type: ignore[attr-defined]
    except InvalidState as exc:
        draft = form.data.get("state", "")
        return _render_run(
            request, run, 400, state_errors=exc.problems, state_syntax=exc.syntax, state_draft=draft
        )
    except RunChanged as exc:
        fresh = _reload(run)
        seen = form.cleaned_data.get("seen")
        found = recovered.recovered_since(fresh, seen=seen, now=timezone.now())
        if found is None:
            return _render_run(request, fresh, exc.status, notice=exc.message)
        notice = recovered.recovered_notice(found, action)
        if not request.htmx:  # type: ignore[attr-defined]
            messages.info(request, notice)
            return redirect("console:console_run", run_id=run.pk)
        return _render_run(request, fresh, notice=notice)
    except AppError as exc:
        return _render_run(request, _reload(run), exc.status, form_errors=exc.message)
    if result.pk != run.pk:  # replayed as a new run: go there
        url = reverse("console:console_run", args=[result.pk])
        messages.success(request, f"{done} A new run was started.")
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)  # type: ignore[attr-defined]
    if not request.htmx:  # type: ignore[attr-defined]
        messages.success(request, done)
        return redirect("console:console_run", run_id=run.pk)
    return _render_run(request, result, notice=done)


def _form_problems(form: VersionForm) -> str:
    """A refused action's inputs, in words. The version and the last event seen are the
    page's own: without them the page is stale (or was edited by hand)."""
    if "version" in form.errors or "seen" in form.errors:
        return "This page did not say which version of the run it showed: reload it and try again."
    return " ".join(
        f"{form[name].label}: {' '.join(errors)}" for name, errors in form.errors.items()
    )


def _reload(run: Run) -> Run:
    return Run.objects.for_tenant(run.tenant_id).get(pk=run.pk)
