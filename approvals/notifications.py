"""Email to the people who may decide a request, with a link to it in the console."""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.urls import reverse

from approvals.models import ApprovalRequest, ApproverGroupMember, ApproverRole
from tenants.models import Membership, Role
from tenants.scope import tenant_scope


def recipients(request: ApprovalRequest, *, kind: str) -> list[str]:
    """Addresses of who may decide: the policy's role and group, minus the run's starter under
    the four-eyes rule; after an escalation, the tenant's admins."""
    admins_only = request.approver_role == ApproverRole.ADMIN
    roles = [Role.ADMIN] if admins_only else [Role.MANAGER, Role.ADMIN]
    members = Membership.objects.for_tenant(request.tenant_id).select_related("user")
    if kind == "escalated":
        members = members.filter(role=Role.ADMIN)
    else:
        members = members.filter(role__in=roles)
        if request.approver_group_id is not None:
            in_group = ApproverGroupMember.objects.for_tenant(request.tenant_id).filter(
                group_id=request.approver_group_id
            )
            members = members.filter(user_id__in=in_group.values("user_id"))
    if request.four_eyes and request.started_by_id is not None:
        members = members.exclude(user_id=request.started_by_id)
    return sorted({m.user.email for m in members if m.user.email and m.user.is_active})


def request_url(request: ApprovalRequest) -> str:
    base = str(settings.AGENTSTATE_CONSOLE_URL).rstrip("/")
    return base + reverse("approvals:approval_detail", args=[request.pk])


def message_for(request: ApprovalRequest, *, kind: str) -> tuple[str, str]:
    what = request.action + (f" for {request.amount}" if request.amount is not None else "")
    if kind == "escalated":
        subject = f"Escalated to admins: {what} is past its deadline"
    else:
        subject = f"Approval needed: {what}"
    lines = [
        f"An agent run of {request.tenant.name} is waiting for a decision.",
        "",
        f"Action:   {request.action}",
        f"Amount:   {request.amount if request.amount is not None else '-'}",
        f"Reason:   {request.reason or '-'}",
        f"Due:      {request.due_at.isoformat() if request.due_at else 'no deadline'}",
    ]
    if kind == "escalated":
        lines.append("Nobody decided before the deadline, so admins may now decide it.")
    lines += ["", f"Review it: {request_url(request)}", ""]
    return subject, "\n".join(lines)


def request_notify(*, tenant_id: Any, request_id: Any, kind: str = "requested") -> int:
    """Send one email per eligible approver; nothing if the request is no longer pending."""
    with tenant_scope(tenant_id):
        request = (
            ApprovalRequest.objects.for_tenant(tenant_id)
            .select_related("tenant")
            .filter(pk=request_id)
            .first()
        )
        if request is None or not request.is_pending:
            return 0
        to = recipients(request, kind=kind)
        subject, body = message_for(request, kind=kind)
    if not to:
        return 0
    # One message each: approvers do not see each other's addresses.
    emails = [EmailMessage(subject, body, settings.DEFAULT_FROM_EMAIL, [address]) for address in to]
    return get_connection().send_messages(emails) or 0


def queue_notification(kwargs: dict[str, str]) -> None:
    """Send the approvals.notify_approvers task (by name: the tasks module imports services)."""
    current_app.send_task("approvals.notify_approvers", kwargs=kwargs)


def notify_approvers_on_commit(request: Any, *, kind: str) -> None:
    """Queue the email once the request is committed; a broker hiccup never fails the step."""
    kwargs = {"tenant_id": str(request.tenant_id), "request_id": str(request.pk), "kind": kind}
    transaction.on_commit(lambda: queue_notification(kwargs), robust=True)
