"""The approvals feed of the live websocket (agents/live/): the nav badge, the inbox list and a
request's page, rendered from the database with the templates the HTTP views render.

A page subscribes with `{"type": "subscribe", "kind": "approvals", "filter": ...}` where the
filter says what it shows: absent (only the nav badge), the inbox's query string (`status=...`,
`action=...`, `mine=on`, `after=...`; empty for the default list) or `request=<uuid>` (one
request's page). Only what the page shows is sent, and only to whom the HTTP pages would show
it: the badge to people who approve, the inbox and a request as
`selectors.approval_requests_visible_to` allows (a member hears nothing about another
member's run, another tenant nothing at all).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404, QueryDict
from django.template.loader import render_to_string

from agents.runtime.selectors import runs_for
from approvals import selectors
from approvals.forms import InboxFilterForm
from approvals.models import ApprovalRequest
from approvals.views import DETAIL, INBOX, detail_context, inbox_list_context
from tenants.models import Scope
from tenants.principal import Principal
from tenants.scope import tenant_scope


def approvals_feed(
    principal: Principal, event: dict[str, Any] | None, page: str | None = None
) -> list[str]:
    """Messages for this person after `event` (None: on subscribe, send the current state)."""
    query = QueryDict(page or "")
    request_id = query.get("request") if page is not None else None
    approver = principal.can(Scope.APPROVE)
    with tenant_scope(principal.tenant.pk, user_id=getattr(principal.user, "pk", None)):
        # The sender keeps only the newest event per run: a decision's `approval.decided` may
        # reach us as the `run.status` that followed it. Any event of a run that has requests
        # may have changed them; runs without any change nothing here.
        is_approval = event is None or _has_requests(principal, event.get("run_id"))
        if request_id is None and not is_approval:
            return []
        if event is not None and not _sees_run(principal, event.get("run_id")):
            return []  # another member's run: not even that something happened
        messages: list[str] = []
        if request_id is not None:
            messages += _request_page(principal, request_id, event)
        elif page is not None:
            messages.append(_inbox_list(principal, query))
        if approver and is_approval or (page is None and event is None):
            # People who do not approve have no badge: on subscribe it says 0, and then nothing.
            messages.append(_badge(principal))
    return messages


def _has_requests(principal: Principal, run_id: Any) -> bool:
    try:
        return ApprovalRequest.objects.for_tenant(principal.tenant).filter(run_id=run_id).exists()
    except (ValueError, TypeError, ValidationError):
        return False


def _sees_run(principal: Principal, run_id: Any) -> bool:
    if not principal.sees_only_own:
        return True
    try:
        return runs_for(principal).filter(pk=run_id).exists()
    except (ValueError, TypeError, Http404):
        return False


def _badge(principal: Principal) -> str:
    count = (
        selectors.decidable_count(principal, at_most=selectors.BADGE_MOST)
        if principal.can(Scope.APPROVE)
        else 0
    )
    return render_to_string("approvals/_badge.html", {"approvals_badge": count})


def _inbox_list(principal: Principal, query: QueryDict) -> str:
    context, _ = inbox_list_context(principal, InboxFilterForm(query))
    return render_to_string(f"{INBOX}#inbox-list", {**context, "live": True})


def _request_page(principal: Principal, request_id: str, event: dict[str, Any] | None) -> list:
    try:
        approval = selectors.approval_request_for(principal, request_id)
    except Http404:
        return []
    if event is not None and str(event.get("run_id")) != str(approval.run_id):
        return []  # another run's progress
    context = {**detail_context(principal, approval), "principal": principal, "live": True}
    return [render_to_string(f"{DETAIL}#approval-live", context)]
