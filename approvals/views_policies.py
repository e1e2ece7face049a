"""Console pages for approval policies and approver groups: managers read, admins edit.

Plain forms that post and redirect back (this page is edited rarely; the browser's own
navigation is the simplest correct thing); a refused form is shown again with a 400.
"""

from __future__ import annotations

import copy
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from approvals import policies
from approvals.forms import GroupForm, GroupMembersForm, PolicyForm
from approvals.models import ApprovalPolicy, ApproverGroup
from core.errors import AppError
from tenants.models import Scope
from tenants.permissions import require_scope
from tenants.principal import Principal
from tenants.selectors import members_for_tenant

POLICIES = "approvals/policies.html"


def _policy(principal: Principal, policy_id: int) -> ApprovalPolicy:
    try:
        return policies.policies_for_tenant(tenant=principal.tenant).get(pk=policy_id)
    except ApprovalPolicy.DoesNotExist:
        raise Http404 from None


def _group(principal: Principal, group_id: int) -> ApproverGroup:
    try:
        return policies.groups_for_tenant(tenant=principal.tenant).get(pk=group_id)
    except ApproverGroup.DoesNotExist:
        raise Http404 from None


def _page(
    request: HttpRequest,
    *,
    new_form: PolicyForm | None = None,
    edit_forms: dict[int, PolicyForm] | None = None,
    group_form: GroupForm | None = None,
    member_forms: dict[int, GroupMembersForm] | None = None,
    status: int = 200,
) -> HttpResponse:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    tenant = principal.tenant
    admin = principal.can(Scope.ADMIN)
    memberships = list(members_for_tenant(tenant=tenant))
    rows = []
    for policy in policies.policies_for_tenant(tenant=tenant):
        form = (edit_forms or {}).get(policy.pk)
        if form is None and admin:
            form = PolicyForm(instance=policy, tenant=tenant, prefix=f"p{policy.pk}")
        rows.append({"policy": policy, "form": form, "open": policy.pk in (edit_forms or {})})
    groups = []
    for group in policies.groups_for_tenant(tenant=tenant):
        members_form = (member_forms or {}).get(group.pk)
        if members_form is None and admin:
            current = [str(m.user_id) for m in group.members.all()]
            members_form = GroupMembersForm(
                initial={"users": current}, memberships=memberships, prefix=f"g{group.pk}"
            )
        groups.append({"group": group, "form": members_form})
    context: dict[str, Any] = {
        "rows": rows,
        "groups": groups,
        "admin": admin,
        "new_form": new_form or (PolicyForm(tenant=tenant, prefix="new") if admin else None),
        "group_form": group_form or (GroupForm(tenant=tenant) if admin else None),
    }
    return render(request, POLICIES, context, status=status)


@require_http_methods(["GET", "POST"])
@require_scope(Scope.APPROVE)
def policy_list(request: HttpRequest) -> HttpResponse:
    """Which actions wait for whom and until when. Managers read; admins add (POST) here."""
    if request.method == "GET":
        return _page(request)
    principal: Principal = request.principal  # type: ignore[attr-defined]
    if not principal.can(Scope.ADMIN):
        return render(request, "403.html", {"needed": Scope.ADMIN.label}, status=403)
    form = PolicyForm(request.POST, tenant=principal.tenant, prefix="new")
    if not form.is_valid():
        return _page(request, new_form=form, status=400)
    policies.policy_create(actor=principal, action=form.cleaned_data["action"], **form.rules())
    messages.success(request, f"Policy for {form.cleaned_data['action']} added.")
    return redirect("approvals:approval_policies")


@require_POST
@require_scope(Scope.ADMIN)
def policy_edit(request: HttpRequest, policy_id: int) -> HttpResponse:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    policy = _policy(principal, policy_id)
    # The form writes onto its instance while validating; the service gets the untouched one
    # so the audit's "before" is what was saved.
    form = PolicyForm(
        request.POST, instance=copy.copy(policy), tenant=principal.tenant, prefix=f"p{policy.pk}"
    )
    if not form.is_valid():
        return _page(request, edit_forms={policy.pk: form}, status=400)
    policies.policy_update(
        actor=principal, policy=policy, action=form.cleaned_data["action"], **form.rules()
    )
    messages.success(request, "Policy saved. Requests already waiting keep their rules.")
    return redirect("approvals:approval_policies")


@require_POST
@require_scope(Scope.ADMIN)
def policy_delete(request: HttpRequest, policy_id: int) -> HttpResponse:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    policy = _policy(principal, policy_id)
    policies.policy_delete(actor=principal, policy=policy)
    messages.success(request, f"Policy for {policy.action} deleted.")
    return redirect("approvals:approval_policies")


@require_POST
@require_scope(Scope.ADMIN)
def group_create(request: HttpRequest) -> HttpResponse:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    form = GroupForm(request.POST, tenant=principal.tenant)
    if not form.is_valid():
        return _page(request, group_form=form, status=400)
    policies.group_create(actor=principal, name=form.cleaned_data["name"])
    messages.success(request, f"Group {form.cleaned_data['name']} created.")
    return redirect("approvals:approval_policies")


@require_POST
@require_scope(Scope.ADMIN)
def group_members(request: HttpRequest, group_id: int) -> HttpResponse:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    group = _group(principal, group_id)
    memberships = list(members_for_tenant(tenant=principal.tenant))
    form = GroupMembersForm(request.POST, memberships=memberships, prefix=f"g{group.pk}")
    if not form.is_valid():
        return _page(request, member_forms={group.pk: form}, status=400)
    policies.group_set_members(actor=principal, group=group, users=form.chosen())
    messages.success(request, f"Members of {group.name} saved.")
    return redirect("approvals:approval_policies")


@require_POST
@require_scope(Scope.ADMIN)
def group_delete(request: HttpRequest, group_id: int) -> HttpResponse:
    principal: Principal = request.principal  # type: ignore[attr-defined]
    group = _group(principal, group_id)
    try:
        policies.group_delete(actor=principal, group=group)
    except AppError as exc:
        messages.error(request, exc.message)
        return _page(request, status=exc.status)
    messages.success(request, f"Group {group.name} deleted.")
    return redirect("approvals:approval_policies")
