"""Console pages of the agents app: the runs list, one run, starting, cancelling, approving."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from agents import selectors, services
from agents.definitions import all_agents
from agents.forms import DecisionForm, RunFilterForm, StartRunForm, make_cursor
from agents.models import Checkpoint, Run, RunStatus, StepAttempt
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tenants.errors import AppError
from tenants.models import Scope
from tenants.permissions import require_scope
from tenants.principal import Principal

PAGE_SIZE = 50
RUNS = "agents/runs.html"
RUN = "agents/run_detail.html"


# --- helpers ---------------------------------------------------------------------------------


def get_run_for_member(request: HttpRequest, run_id: uuid.UUID) -> Run:
    """The run, or 404 for other tenants and, for members, other members' runs."""
    return selectors.run_for(request.principal, run_id)


def _partial(request: HttpRequest) -> bool:
    """An htmx swap asks for a fragment; a history restore needs the whole page."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def _vary(response: HttpResponse) -> HttpResponse:
    # Full page and fragment share a URL: caches must keep them apart.
    patch_vary_headers(response, ["HX-Request"])
    return response


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


# --- runs list -------------------------------------------------------------------------------


@require_GET
@require_scope(Scope.READ)
def run_list(request: HttpRequest) -> HttpResponse:
    """Runs of the tenant (a member's own), newest first, filtered, paged by a cursor."""
    filters = RunFilterForm(request.GET)
    table, status = _runs_table(request.principal, filters)
    if _partial(request):
        return _vary(render(request, f"{RUNS}#runs-table", table, status=status))
    return _vary(_runs_page(request, table, status=status))


@require_POST
@require_scope(Scope.WRITE)
def run_start(request: HttpRequest) -> HttpResponse:
    """Start a run from the form; go to its page, or show the form again with errors."""
    form = StartRunForm(request.POST)
    run = _start_run(request.principal, form) if form.is_valid() else None
    if run is not None:
        url = reverse("run_detail", args=[run.pk])
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    if request.htmx:
        return render(request, f"{RUNS}#start-form", {"start_form": form}, status=400)
    table, _ = _runs_table(request.principal, RunFilterForm({}))
    return _runs_page(request, table, start_form=form, status=400)


def _start_run(principal: Principal, form: StartRunForm) -> Run | None:
    """Start the run in a new conversation (so its replies are kept); None on failure."""
    data = form.cleaned_data
    try:
        return services.conversation_start(
            principal=principal,
            agent=data["agent"],
            message=data["message"],
            input=form.run_input(),
            title=data["customer"],
        )
    except AppError as exc:
        form.add_error("agent", exc.message)
        return None


def _runs_page(
    request: HttpRequest,
    table: dict[str, Any],
    *,
    start_form: StartRunForm | None = None,
    status: int = 200,
) -> HttpResponse:
    principal = request.principal
    if start_form is None and principal.can(Scope.WRITE):
        start_form = StartRunForm()
    context = {**table, "counts": _status_counts(principal), "start_form": start_form}
    return render(request, RUNS, context, status=status)


def _runs_table(principal: Principal, filters: RunFilterForm) -> tuple[dict[str, Any], int]:
    """One page of runs for the filter form, and the status code it deserves."""
    if not filters.is_valid():
        return {"filters": filters, "runs": [], "invalid": True}, 400
    data = filters.cleaned_data
    runs = selectors.runs_for(principal, status=data["status"] or None, agent=data["agent"] or None)
    runs = runs.select_related("created_by").order_by("-created_at", "-id")
    if data["before"]:
        created_at, pk = data["before"]
        runs = runs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=pk))
    page = list(runs[: PAGE_SIZE + 1])
    keep = {k: data[k] for k in ("status", "agent") if data[k]}
    older = None
    if len(page) > PAGE_SIZE:
        page = page[:PAGE_SIZE]
        cursor = make_cursor(page[-1].created_at, page[-1].pk)
        older = "?" + urlencode({**keep, "before": cursor})
    return {
        "filters": filters,
        "runs": page,
        "older_url": older,
        "newest_url": ("?" + urlencode(keep)) if data["before"] else None,
        "only_own": principal.sees_only_own,
    }, 200


def _status_counts(principal: Principal) -> list[dict[str, Any]]:
    rows = selectors.runs_for(principal).order_by().values_list("status").annotate(n=Count("id"))
    counts = dict(rows)
    return [
        {"value": value, "label": label, "count": counts.get(value, 0)}
        for value, label in RunStatus.choices
    ]


# --- one run ---------------------------------------------------------------------------------


@dataclass
class StepEntry:
    """One step of the timeline: its checkpoint (once written) and every attempt at it."""

    seq: int
    step: str
    checkpoint: Checkpoint | None = None
    attempts: list[StepAttempt] = field(default_factory=list)


@require_GET
@require_scope(Scope.READ)
def run_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """The run: status, steps with their attempts, state, transcript, ledger, approvals."""
    run = get_run_for_member(request, run_id)
    context = _run_context(run)
    if _partial(request) and request.GET.get("seen") == context["digest"]:
        return _vary(HttpResponse(status=204))  # nothing changed: the poll swaps nothing
    return _vary(_run_response(request, context))


@require_POST
@require_scope(Scope.WRITE)
def run_cancel(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Cancel the run (a running one stops at its next step boundary)."""
    run = get_run_for_member(request, run_id)
    try:
        run = services.run_cancel(principal=request.principal, run=run)
    except AppError as exc:
        return _run_response(request, _run_context(run, cancel_error=exc.message), exc.status)
    if not request.htmx:
        messages.success(request, "Cancel requested." if not run.is_finished else "Cancelled.")
        return redirect("run_detail", run_id=run.pk)
    return _run_response(request, _run_context(run))


@require_POST
@require_scope(Scope.APPROVE)
def run_approval_decide(
    request: HttpRequest, run_id: uuid.UUID, approval_id: uuid.UUID
) -> HttpResponse:
    """Approve or reject one of the run's approval requests."""
    run = get_run_for_member(request, run_id)
    approval = _approval_for_run(run, approval_id)
    form = DecisionForm(request.POST)
    error, status = _decide(request.principal, approval, form)
    if status == 200 and not request.htmx:
        messages.success(request, f"{approval.get_status_display()}: the run resumes.")
        return redirect("run_detail", run_id=run.pk)
    if request.htmx:
        _dress_approval(approval, error=error, draft=form.data.get("comment", ""))
        return render(request, f"{RUN}#approval", {"approval": approval}, status=status)
    errors = {approval.pk: (error, form.data.get("comment", ""))}
    return _run_response(request, _run_context(run, approval_errors=errors), status)


def _decide(
    principal: Principal, approval: ApprovalRequest, form: DecisionForm
) -> tuple[str | None, int]:
    if not form.is_valid():
        return "Choose Approve or Reject; a comment has at most 2,000 characters.", 400
    try:
        approval_decide(
            principal=principal,
            request=approval,
            approve=form.approve,
            comment=form.cleaned_data["comment"],
        )
    except AppError as exc:
        return exc.message, exc.status
    return None, 200


def _run_response(request: HttpRequest, context: dict[str, Any], status: int = 200) -> HttpResponse:
    template = f"{RUN}#run-live" if _partial(request) else RUN
    return render(request, template, context, status=status)


def _approvals_for_run(run: Run) -> QuerySet[ApprovalRequest]:
    # A small read of the approvals app's table, scoped by tenant and run; the run itself was
    # resolved through run_for, so whoever sees the run may see its approvals.
    return ApprovalRequest.objects.for_tenant(run.tenant_id).filter(run=run)


def _approval_for_run(run: Run, approval_id: uuid.UUID) -> ApprovalRequest:
    try:
        return _approvals_for_run(run).get(pk=approval_id)
    except ApprovalRequest.DoesNotExist:
        raise Http404 from None


def _dress_approval(approval: ApprovalRequest, *, error: str | None, draft: str) -> None:
    """What the approval partial shows beyond the row: pretty arguments, an error, a draft."""
    approval.arguments_json = _pretty(approval.arguments)
    approval.error, approval.draft = error, draft


def _run_context(
    run: Run,
    *,
    cancel_error: str | None = None,
    approval_errors: dict[uuid.UUID, tuple[str | None, str]] | None = None,
) -> dict[str, Any]:
    """Everything the run page shows, read in one go."""
    timeline = selectors.run_timeline(run)
    approvals = list(_approvals_for_run(run).order_by("-requested_at"))
    for approval in approvals:
        error, draft = (approval_errors or {}).get(approval.pk, (None, ""))
        _dress_approval(approval, error=error, draft=draft)
    transcript = list(selectors.transcript(run.session)) if run.session_id else []
    for message in transcript:
        message.tool_call_json = _pretty(message.tool_call)
        message.tool_result_json = _pretty(message.tool_result)
    for call in timeline["tool_calls"]:
        call.result_json = _pretty(call.result)
    checkpoints = timeline["checkpoints"]
    latest = checkpoints[-1] if checkpoints else None
    context = {
        "run": run,
        "steps": _steps(checkpoints, timeline["attempts"]),
        "tool_calls": timeline["tool_calls"],
        "approvals": approvals,
        "transcript": transcript,
        "state": _pretty(latest.state) if latest else None,
        "input": _pretty(run.input),
        "output": None if run.output is None else _pretty(run.output),
        "error_detail": _error_detail(run.error),
        "cancel_error": cancel_error,
    }
    context["digest"] = _digest(context)
    return context


def _steps(checkpoints: list[Checkpoint], attempts: list[StepAttempt]) -> list[StepEntry]:
    """Group by checkpoint seq; attempts that wrote no checkpoint yet get their own entry."""
    entries: dict[int, StepEntry] = {}
    for cp in checkpoints:
        entries[cp.seq] = StepEntry(seq=cp.seq, step=cp.step, checkpoint=cp)
    for attempt in attempts:
        entry = entries.setdefault(attempt.seq, StepEntry(seq=attempt.seq, step=attempt.step))
        entry.attempts.append(attempt)
    return [entries[seq] for seq in sorted(entries)]


def _error_detail(error: Any) -> str | None:
    """The run's error beyond its code and message (class, step, attempt), if any."""
    if not isinstance(error, dict):
        return None if error is None else _pretty(error)
    rest = {k: v for k, v in error.items() if k not in ("code", "message")}
    return _pretty(rest) if rest else None


def _digest(context: dict[str, Any]) -> str:
    """What the live section shows, condensed: the poll skips the swap when it is unchanged."""
    run = context["run"]
    parts = [
        run.version,
        run.status,
        run.cancel_requested,
        [(a.pk, a.outcome) for s in context["steps"] for a in s.attempts],
        [(t.pk, t.status, t.sends) for t in context["tool_calls"]],
        [(a.pk, a.status, a.version) for a in context["approvals"]],
        [m.pk for m in context["transcript"]],
    ]
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:20]


# --- the agent registry ----------------------------------------------------------------------


@require_GET
@require_scope(Scope.READ)
def agent_list(request: HttpRequest) -> HttpResponse:
    """Every registered agent with its version and steps."""
    return render(request, "agents/agents.html", {"agents": all_agents()})
