"""Console pages of the agents app: the runs list, one run, starting, cancelling, approving."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from agents.presenters import context_record, pages
from agents.presenters.forms import DecisionForm, RunFilterForm, StartRunForm
from agents.runtime import selectors, services
from agents.runtime.definitions import all_agents
from agents.runtime.models import Run
from agents.web import chat
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from core.confirm import confirmation_response
from core.errors import AppError
from core.htmx import is_partial, render_fragments, vary_on_htmx
from core.params import positive_int
from tenants.models import Scope
from tenants.permissions import require_scope
from tenants.principal import Principal
from tenants.replica import lag_tolerant

RUNS = "agents/runs.html"
RUN = "agents/run_detail.html"


# --- helpers --------------------------------------------------------------------------------------


def get_run_for_member(request: HttpRequest, run_id: uuid.UUID) -> Run:
    """The run, or 404 for other tenants and, for members, other members' runs."""
    return selectors.run_for(request.principal, run_id)


# --- runs list ------------------------------------------------------------------------------------


@require_GET
@require_scope(Scope.READ)
@lag_tolerant
def run_list(request: HttpRequest) -> HttpResponse:
    """Runs of the tenant (a member's own), newest first, filtered, paged by a cursor."""
    filters = RunFilterForm(request.GET)
    table, status = pages.runs_table(request.principal, filters)
    if is_partial(request):  # the table, and the filter form saying what it did not apply
        parts = [f"{RUNS}#runs-table", f"{RUNS}#runs-filters"]
        return vary_on_htmx(render_fragments(request, parts, table, status=status))
    return vary_on_htmx(_runs_page(request, table, status=status))


@require_POST
@require_scope(Scope.WRITE)
def run_start(request: HttpRequest) -> HttpResponse:
    """Start a run from the form; go to its page, or show the form again with errors."""
    form = StartRunForm(request.POST, principal=request.principal)
    run = _start_run(request.principal, form) if form.is_valid() else None
    if run is not None:
        url = reverse("agents:run_detail", args=[run.pk])
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    if request.htmx:
        return render(request, f"{RUNS}#start-form", {"start_form": form}, status=400)
    table, _ = pages.runs_table(request.principal, RunFilterForm({}))
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
        start_form = StartRunForm(principal=principal)
    context = {**table, "counts": selectors.status_counts(principal), "start_form": start_form}
    return render(request, RUNS, context, status=status)


# --- one run --------------------------------------------------------------------------------------


@require_GET
@require_scope(Scope.READ)
def run_detail(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """The run: status, steps with their attempts, state, transcript, ledger, approvals.

    It stays current over the websocket (agents/live/): no polling."""
    run = get_run_for_member(request, run_id)
    context = pages.run_context(run, plain=request.principal.sees_only_own)
    return vary_on_htmx(_run_response(request, context))


@require_http_methods(["GET", "POST"])
@require_scope(Scope.WRITE)
def run_cancel(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """GET: ask first (core.confirm). POST: cancel the run (a running one stops at its next
    step boundary)."""
    run = get_run_for_member(request, run_id)
    if request.method == "GET":
        return confirmation_response(request, pages.cancel_confirmation(run))
    try:
        run = services.run_cancel(principal=request.principal, run=run)
    except AppError as exc:
        context = pages.run_context(
            run, plain=request.principal.sees_only_own, cancel_error=exc.message
        )
        return _run_response(request, context, exc.status)
    if not request.htmx:
        messages.success(request, "Cancel requested." if not run.is_finished else "Cancelled.")
        return redirect("agents:run_detail", run_id=run.pk)
    return _run_response(request, pages.run_context(run, plain=request.principal.sees_only_own))


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
        return redirect("agents:run_detail", run_id=run.pk)
    if request.htmx:
        pages.dress_approval(approval, error=error, draft=form.data.get("comment", ""))
        return render(request, f"{RUN}#approval", {"approval": approval}, status=status)
    errors = {approval.pk: (error, form.data.get("comment", ""))}
    return _run_response(
        request,
        pages.run_context(run, plain=request.principal.sees_only_own, approval_errors=errors),
        status,
    )


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
    template = f"{RUN}#run-live" if is_partial(request) else RUN
    context["context_records"] = context_record.records_for(request.principal, context["run"])
    return render(request, template, context, status=status)


def _approval_for_run(run: Run, approval_id: uuid.UUID) -> ApprovalRequest:
    try:
        return ApprovalRequest.objects.for_tenant(run.tenant_id).get(run=run, pk=approval_id)
    except ApprovalRequest.DoesNotExist:
        raise Http404 from None


# --- the agent registry ---------------------------------------------------------------------------


@require_GET
@require_scope(Scope.READ)
def agent_list(request: HttpRequest) -> HttpResponse:
    """Every registered agent with its version and steps."""
    return render(request, "agents/agents.html", {"agents": all_agents()})


# --- conversations and forks ----------------------------------------------------------------------

CONVERSATION = "agents/conversation.html"


def get_session_for_member(request: HttpRequest, session_id: uuid.UUID) -> Any:
    """The conversation, or 404 for other tenants and, for members, other members' ones."""
    return selectors.session_for(request.principal, session_id)


@require_GET
@require_scope(Scope.READ)
def conversation_list(request: HttpRequest) -> HttpResponse:
    """Conversations, newest first, with where each was forked from; writers start a chat."""
    context = {**pages.conversation_list(request.principal), **chat.start_context(request)}
    return render(request, "agents/conversations.html", context)


@require_GET
@require_scope(Scope.READ)
def conversation_detail(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """The conversation's chat, then its whole thread (inherited messages first), forks, runs."""
    session = get_session_for_member(request, session_id)
    context = pages.conversation_context(request.principal, session)
    return render(request, CONVERSATION, {**context, **chat.chat_context(request, session)})


@require_POST
@require_scope(Scope.WRITE)
def conversation_fork(request: HttpRequest, session_id: uuid.UUID) -> HttpResponse:
    """Fork the conversation after one of its messages and open the fork."""
    session = get_session_for_member(request, session_id)
    raw = request.POST.get("at_seq", "")
    try:
        fork = services.session_fork(
            principal=request.principal,
            session=session,
            at_seq=positive_int(raw.strip()) or raw,
            title=request.POST.get("title", "")[:200],
        )
    except AppError as exc:
        context = pages.conversation_context(request.principal, session, fork_error=exc.message)
        context.update(chat.chat_context(request, session))
        return render(request, CONVERSATION, context, status=exc.status)
    url = reverse("agents:conversation_detail", args=[fork.pk])
    if request.htmx:
        return HttpResponseClientRedirect(url)
    messages.success(request, "Forked: this conversation continues from the chosen message.")
    return redirect(url)


@require_GET
@require_scope(Scope.READ)
def run_context(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """What each step of the run packed for the model, and why (a partial for htmx)."""
    run = get_run_for_member(request, run_id)
    context = {"run": run, "records": context_record.records_for(request.principal, run)}
    template = "agents/_packed_context.html"
    return vary_on_htmx(
        render(request, f"{template}#packed-context" if is_partial(request) else template, context)
    )
