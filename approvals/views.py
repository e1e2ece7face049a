"""Console pages of the approvals app: the inbox, one request, deciding it, the nav badge.

Nothing polls: the inbox list, the request page and the nav badge are pushed again over the
live websocket by the approvals feed (approvals/live.py), which renders these same partials.
"""

from __future__ import annotations

import json
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents.runtime.definitions import agent_currency, run_summary
from agents.runtime.selectors import packed_contexts, transcript
from approvals import arguments, selectors
from approvals.errors import InvalidArguments
from approvals.forms import DecisionForm, InboxFilterForm, edited_arguments
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.policies import group_ids_of, refusal
from approvals.services import approval_decide
from core import charts
from core.errors import AppError
from core.htmx import is_partial, render_fragments, vary_on_htmx
from tenants.models import Scope
from tenants.permissions import require_scope
from tenants.principal import Principal
from tenants.replica import lag_tolerant

INBOX = "approvals/inbox.html"
DETAIL = "approvals/detail.html"
PAGE_SIZE = 25


def get_request_for_member(request: HttpRequest, request_id: uuid.UUID) -> ApprovalRequest:
    """The approval request, or 404 for other tenants and for members' others' runs."""
    return selectors.approval_request_for(request.principal, request_id)  # type: ignore[attr-defined]


# --- the inbox ------------------------------------------------------------------------------------


@require_GET
@require_scope(Scope.READ)
@lag_tolerant
def inbox(request: HttpRequest) -> HttpResponse:
    """Pending requests by deadline (filters, keyset pages), kept live over the socket."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    # Only those who may decide are offered "only requests I may decide".
    filters = InboxFilterForm(request.GET, hide=() if principal.can(Scope.APPROVE) else ["mine"])
    context, status = inbox_list_context(principal, filters)
    if is_partial(request):  # the list, and the filter form saying what it did not apply
        parts = [f"{INBOX}#inbox-list", f"{INBOX}#inbox-filters"]
        return vary_on_htmx(render_fragments(request, parts, context, status=status))
    if context["can_approve"]:
        context["approvals_badge"] = context["counts"]["mine"]  # counted once, not twice
    return vary_on_htmx(render(request, INBOX, context, status=status))


def inbox_list_context(
    principal: Principal, filters: InboxFilterForm
) -> tuple[dict[str, Any], int]:
    large = selectors.large_backlog(principal)  # read once for every number the page shows
    counts = selectors.inbox_counts(principal, large=large)
    data = filters.applied()  # a bad filter is not applied (the form says so)
    page = selectors.inbox_page(
        principal,
        status=data["status"],
        action=data["action"],
        mine=data["mine"],
        after=data["after"],
        limit=PAGE_SIZE,
    )
    _dress_rows(principal, page.rows)
    keep = {"action": data["action"], "mine": "on" if data["mine"] else ""}
    if data["status"] != ApprovalStatus.PENDING:
        keep["status"] = data["status"]
    keep = {k: v for k, v in keep.items() if v}
    here = {**keep, "after": filters.data.get("after", "")} if data["after"] else keep
    context = {
        "filters": filters,
        "rows": page.rows,
        "counts": counts,
        "pending_view": data["status"] == ApprovalStatus.PENDING,
        "next_url": "?" + urlencode({**keep, "after": page.next.encode()}) if page.next else None,
        "first_url": ("?" + urlencode(keep)) if data["after"] else None,
        "live_filter": urlencode(here),
        "can_approve": principal.can(Scope.APPROVE),
    }
    if context["pending_view"]:
        context["age_chart"] = age_chart(principal, large=large)
    return context, 200 if filters.is_valid() else 400


# Short enough for seven buckets side by side on a phone; the table and tooltips say them in full.
AGE_AXIS = {
    "5m": "<5m",
    "30m": "5–30m",
    "2h": "30m–2h",
    "8h": "2–8h",
    "1d": "8–24h",
    "3d": "1–3d",
    "old": ">3d",
}
AGE_SERIES = [charts.Series("ontime", "Within their deadline"), charts.Series("late", "Past it")]


def age_chart(principal: Principal, *, large: bool | None = None) -> Any:
    """The pending requests by how long they have waited, split by their deadline."""
    ages = selectors.pending_by_age(principal, now=timezone.now(), large=large)
    points = [
        charts.Point(AGE_AXIS.get(key, label), label, {"ontime": ok, "late": late})
        for key, label, ok, late in ages
    ]
    waiting = sum(ok + late for _, _, ok, late in ages)
    oldest = next((label for _, label, ok, late in reversed(ages) if ok + late), "")
    late = sum(late for _, _, _, late in ages)
    return charts.bar_chart(
        id="approvals-by-age",
        title="Pending requests by how long they have waited",
        description=f"{waiting} pending, {late} past their deadline; the oldest waited {oldest}.",
        series=AGE_SERIES,
        points=points,
        empty="No request is waiting: nothing to chart.",
        axis="Waiting",
    )


def _dress_rows(principal: Principal, rows: list[ApprovalRequest]) -> None:
    """What each row shows beyond its fields: overdue, and whether this person may decide."""
    now = timezone.now()
    groups = group_ids_of(principal) if principal.can(Scope.APPROVE) else []
    for row in rows:
        row.overdue = row.is_pending and row.due_at is not None and row.due_at <= now  # type: ignore[attr-defined]
        row.refusal = (  # type: ignore[attr-defined]
            refusal(principal, row, groups) if row.is_pending else None
        )
        row.who_decides = who_decides(row)  # type: ignore[attr-defined]
        row.customer = customer_of(row)  # type: ignore[attr-defined]
        row.currency = currency_of(row)  # type: ignore[attr-defined]
        row.run_summary = run_summary(row.run.agent, row.run.input, row.run.output)  # type: ignore[attr-defined]


def customer_of(approval: ApprovalRequest) -> str:
    """Whom the request is about: its arguments' customer, else the run's."""
    for source in (approval.arguments, approval.run.input):
        if isinstance(source, dict) and source.get("customer"):
            return str(source["customer"])[:200]
    return ""


def currency_of(approval: ApprovalRequest) -> str:
    """The currency of the request's amount: its arguments' (an ISO 4217 code), else the one
    its agent declares, else "" (the page then says none is known)."""
    named = approval.arguments.get("currency") if isinstance(approval.arguments, dict) else None
    if isinstance(named, str) and len(named) == 3 and named.isalpha():
        return named.upper()
    return agent_currency(approval.run.agent)


def who_decides(approval: ApprovalRequest) -> str:
    """Who may decide, in words, from the rules copied onto the request."""
    text = approval.get_approver_role_display()
    if approval.approver_group_name:
        text += f" in {approval.approver_group_name}"
    if approval.four_eyes:
        starter = approval.started_by_label or "the run's starter"
        text += f", not {starter} (four eyes)"
    return text


@require_GET
@require_scope(Scope.READ)
def badge(request: HttpRequest) -> HttpResponse:
    """The nav badge alone: pending requests this person may decide (204 when unchanged)."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    count = (
        selectors.decidable_count(principal, at_most=selectors.BADGE_MOST)
        if principal.can(Scope.APPROVE)
        else 0
    )
    if request.GET.get("shown") == str(count):
        return vary_on_htmx(HttpResponse(status=204))
    return vary_on_htmx(render(request, "approvals/_badge.html", {"approvals_badge": count}))


# --- one request ----------------------------------------------------------------------------------


@dataclass
class Draft:
    """What the person typed, shown again with the errors when a decision is refused."""

    comment: str = ""
    args: dict[str, str] = field(default_factory=dict)
    json: str = ""
    edit_open: bool = False
    error: str | None = None
    form_errors: dict[str, list[str]] = field(default_factory=dict)
    arg_errors: dict[str, list[Any]] = field(default_factory=dict)


@require_GET
@require_scope(Scope.READ)
def detail(request: HttpRequest, request_id: uuid.UUID) -> HttpResponse:
    """The request: proposed action and arguments, reason, transcript, decision, audit."""
    approval = get_request_for_member(request, request_id)
    context = detail_context(request.principal, approval)  # type: ignore[attr-defined]
    if is_partial(request):
        return vary_on_htmx(render(request, f"{DETAIL}#approval-live", context))
    return vary_on_htmx(render(request, DETAIL, context))


@require_POST
@require_scope(Scope.APPROVE)
def decide(request: HttpRequest, request_id: uuid.UUID) -> HttpResponse:
    """Approve (as proposed or with edited arguments) or reject with a comment: once."""
    principal: Principal = request.principal  # type: ignore[attr-defined]
    approval = get_request_for_member(request, request_id)
    draft, status = _decide(principal, approval, request.POST)
    approval.run.refresh_from_db()  # resumed by the decision, or by whoever won
    if status == 200 and not request.htmx:  # type: ignore[attr-defined]
        messages.success(request, f"{approval.get_status_display()}: the run resumes.")
        return redirect("approvals:approval_detail", request_id=approval.pk)
    context = detail_context(principal, approval, draft=draft)
    template = f"{DETAIL}#approval-live" if is_partial(request) else DETAIL
    response = render(request, template, context, status=status)
    if status == 200:
        response["HX-Trigger"] = "approvals-changed"  # for scripts; the live feed sends the badge
    return response


def _decide(principal: Principal, approval: ApprovalRequest, data: Any) -> tuple[Draft, int]:
    form = DecisionForm(data)
    draft = Draft(
        comment=data.get("comment", ""),
        args={k[4:]: v for k, v in data.items() if k.startswith("arg-")},
        json=data.get("arguments_json", ""),
        edit_open=bool(data.get("edit")),
    )
    if not form.is_valid():
        draft.form_errors = {k: [str(e) for e in v] for k, v in form.errors.items()}
        draft.error = "Choose Approve or Reject; fix the marked fields."
        return draft, 400
    edited = None
    if form.cleaned_data["edit"]:
        fields = arguments.editable_fields(approval.action, approval.arguments)
        edited, problems = edited_arguments(fields, data)
        if problems:
            draft.arg_errors, draft.error = problems, "The arguments are not valid."
            return draft, 400
    try:
        approval_decide(
            principal=principal,
            request=approval,
            approve=form.approve,
            comment=form.cleaned_data["comment"],
            edited_arguments=edited,
        )
    except InvalidArguments as exc:
        draft.arg_errors = exc.problems
        draft.error = "The edited arguments do not fit the tool's schema; nothing was decided."
        return draft, 400
    except AppError as exc:
        draft.error = exc.message
        return draft, exc.status
    return Draft(), 200


def _memories_used(approval: ApprovalRequest) -> list[dict[str, Any]] | None:
    """The memory items packed for the model call that led to the request (labels only: a
    fact's text is never copied into the record, so a deleted fact cannot linger here): the
    asking step's, or, when a tool step asked (tool-calling agents), the latest model step's
    before it; None when no step packed context."""
    earlier = packed_contexts(approval.run).filter(seq__lte=approval.checkpoint_seq)
    last = earlier.order_by("-seq").values_list("seq", flat=True).first()
    if last is None:
        return None
    packs = list(earlier.filter(seq=last))
    return [item for pack in packs for item in pack.items if item["section"] == "memory"]


def detail_context(
    principal: Principal, approval: ApprovalRequest, *, draft: Draft | None = None
) -> dict[str, Any]:
    """Everything the request page shows, read in one go."""
    draft = draft or Draft()
    run = approval.run
    messages_ = list(transcript(run.session)) if run.session is not None else []
    for message in messages_:
        message.tool_call_json = arguments.pretty(message.tool_call)  # type: ignore[attr-defined]
        message.tool_result_json = arguments.pretty(message.tool_result)  # type: ignore[attr-defined]
    audit = selectors.approval_request_audit(approval)
    for event in audit:
        event.change = _audit_change(event.before, event.after)
    reason = None
    if approval.is_pending and principal.can(Scope.APPROVE):
        reason = refusal(principal, approval)
    fields = arguments.editable_fields(approval.action, approval.arguments)
    context = {
        "approval": approval,
        "run": run,
        "overdue": approval.is_pending
        and approval.due_at is not None
        and approval.due_at <= timezone.now(),
        "argument_rows": arguments.readable(approval.arguments),
        "arguments_json": arguments.pretty(approval.arguments),
        "tool_description": arguments.tool_description(approval.action),
        "edit_fields": _edit_fields(fields, draft),
        "edit_json": draft.json or arguments.pretty(approval.arguments),
        "changes": _changes(approval),
        "may_decide": approval.is_pending and principal.can(Scope.APPROVE) and reason is None,
        "refusal": reason,
        "who_decides": who_decides(approval),
        "transcript": messages_,
        "memories_used": _memories_used(approval),
        "audit": audit,
        "draft": draft,
        "uid": secrets.token_hex(3),
    }
    return context


def _audit_change(before: Any, after: Any) -> str:
    """One line for the audit trail: `key: value`, or `key: old → new` where both are known."""
    if not isinstance(after, dict):
        return ""
    before = before if isinstance(before, dict) else {}
    parts = []
    for key, value in after.items():
        if value in (None, "", [], {}):
            continue
        shown = _short(value)
        if key in before and before[key] != value:
            shown = f"{_short(before[key])} → {shown}"
        parts.append(f"{key}: {shown}")
    return "; ".join(parts)


def _short(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _edit_fields(fields: list[arguments.EditableField] | None, draft: Draft) -> list | None:
    if fields is None:
        return None
    return [
        {
            "field": f,
            "value": draft.args.get(f.name, f.value),
            "errors": draft.arg_errors.get(f.name, []),
        }
        for f in fields
    ]


def _changes(approval: ApprovalRequest) -> list[tuple[str, str, str]]:
    """(name, proposed, approved) for each argument the approver changed."""
    if approval.edited_arguments is None:
        return []
    before = dict(arguments.readable(approval.arguments))
    after = dict(arguments.readable(approval.edited_arguments))
    names = sorted(set(before) | set(after))
    return [
        (n, before.get(n, "—"), after.get(n, "—")) for n in names if before.get(n) != after.get(n)
    ]
