"""Approval policies and approver groups: the rules (who may decide, which actions wait) and
the admin's writes that change them (audited, keyword-only, atomic)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F, Q, QuerySet

from approvals.errors import GroupInUse, NotAnApprover
from approvals.models import (
    ANY_ACTION,
    ApprovalPolicy,
    ApprovalRequest,
    ApprovalStatus,
    ApproverGroup,
    ApproverGroupMember,
    ApproverRole,
)
from tenants.audit import audit_record
from tenants.models import Role, Scope
from tenants.principal import Principal

POLICY_FIELDS = (
    "amount_threshold",
    "approver_role",
    "approver_group",
    "four_eyes",
    "expires_after_minutes",
    "on_expiry",
)


# --- reads ----------------------------------------------------------------------------------------


def policy_for(*, tenant_id: Any, action: str) -> ApprovalPolicy | None:
    """The tenant's policy for `action`, else its policy for every action, else None."""
    found = {
        p.action: p
        for p in ApprovalPolicy.objects.for_tenant(tenant_id)
        .filter(action__in=[action, ANY_ACTION])
        .select_related("approver_group")
    }
    return found.get(action) or found.get(ANY_ACTION)


def approval_required(*, tenant_id: Any, action: str, amount: Any = None) -> bool:
    """Whether the tenant's policy wants a person to decide `action` for `amount`.

    Agents may ask before pausing; a request made anyway for an amount the policy lets
    through is approved at once by `approval_request_create`.
    """
    return needs_decision(policy_for(tenant_id=tenant_id, action=action), amount)


def needs_decision(policy: ApprovalPolicy | None, amount: Any) -> bool:
    if policy is None or policy.amount_threshold is None or amount is None:
        return True
    return Decimal(str(amount)) > policy.amount_threshold


def policies_for_tenant(*, tenant: Any) -> QuerySet[ApprovalPolicy]:
    return ApprovalPolicy.objects.for_tenant(tenant).select_related("approver_group")


def groups_for_tenant(*, tenant: Any) -> QuerySet[ApproverGroup]:
    return ApproverGroup.objects.for_tenant(tenant).prefetch_related("members__user")


def group_ids_of(principal: Principal) -> list[int]:
    """The approver groups the principal's user belongs to (none for API keys)."""
    if principal.user is None:
        return []
    return list(
        ApproverGroupMember.objects.for_tenant(principal.tenant)
        .filter(user=principal.user)
        .values_list("group_id", flat=True)
    )


def is_admin(principal: Principal) -> bool:
    """Admin rules apply: an admin member, or an API key with the admin scope."""
    if principal.api_key is not None:
        return principal.can(Scope.ADMIN)
    return principal.role == Role.ADMIN


def refusal(
    principal: Principal, request: ApprovalRequest, group_ids: list[int] | None = None
) -> str | None:
    """Why the principal may not decide this request, or None if they may."""
    if not principal.can(Scope.APPROVE):
        return "Your role cannot decide approvals."
    admin = is_admin(principal)
    if request.approver_role == ApproverRole.ADMIN and not admin:
        return "This request is for admins only."
    if request.approver_group_id is not None and not (admin and request.escalated_at):
        ids = group_ids if group_ids is not None else group_ids_of(principal)
        if request.approver_group_id not in ids:
            name = request.approver_group_name or "the named group"
            return f"Only members of {name} may decide this request."
    user = principal.user
    if request.four_eyes and user is not None and request.started_by_id == user.pk:
        return "You started this run; the four-eyes rule needs someone else to decide."
    return None


def check_may_decide(principal: Principal, request: ApprovalRequest) -> None:
    reason = refusal(principal, request)
    if reason is not None:
        raise NotAnApprover(reason)


def decidable_by(principal: Principal, requests: QuerySet[ApprovalRequest]) -> QuerySet:
    """The same rules as `refusal`, as a filter: the requests this principal may decide."""
    if not principal.can(Scope.APPROVE):
        return requests.none()
    admin = is_admin(principal)
    if not admin:
        requests = requests.filter(approver_role=ApproverRole.MANAGER)
    group_ok = Q(approver_group__isnull=True)
    if principal.user is not None:
        group_ok |= Q(
            approver_group__in=ApproverGroupMember.objects.for_tenant(principal.tenant)
            .filter(user=principal.user)
            .values("group_id")
        )
    if admin:
        group_ok |= Q(escalated_at__isnull=False)
    requests = requests.filter(group_ok)
    if principal.user is not None:
        requests = requests.exclude(four_eyes=True, started_by=principal.user)
    return requests


# --- writes ---------------------------------------------------------------------------------------


def _policy_snapshot(policy: ApprovalPolicy) -> dict[str, Any]:
    return {
        "action": policy.action,
        "amount_threshold": None
        if policy.amount_threshold is None
        else str(policy.amount_threshold),
        "approver_role": policy.approver_role,
        "approver_group": policy.approver_group.name if policy.approver_group else None,
        "four_eyes": policy.four_eyes,
        "expires_after_minutes": policy.expires_after_minutes,
        "on_expiry": policy.on_expiry,
    }


@transaction.atomic
def policy_create(*, actor: Principal, action: str, **rules: Any) -> ApprovalPolicy:
    """Add the tenant's policy for `action` (a tool name or '*')."""
    policy = ApprovalPolicy(tenant=actor.tenant, action=action, updated_by_label=actor.label)
    for name in POLICY_FIELDS:
        if name in rules:
            setattr(policy, name, rules[name])
    policy.save()
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="approval_policy.created",
        target=policy,
        after=_policy_snapshot(policy),
    )
    return policy


@transaction.atomic
def policy_update(*, actor: Principal, policy: ApprovalPolicy, **rules: Any) -> ApprovalPolicy:
    """Change a policy's rules; requests already waiting keep the rules they were made with."""
    before = _policy_snapshot(policy)
    for name in ("action", *POLICY_FIELDS):
        if name in rules:
            setattr(policy, name, rules[name])
    policy.updated_by_label = actor.label
    policy.version = F("version") + 1
    policy.save()
    policy.refresh_from_db()
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="approval_policy.updated",
        target=policy,
        before=before,
        after=_policy_snapshot(policy),
    )
    return policy


@transaction.atomic
def policy_delete(*, actor: Principal, policy: ApprovalPolicy) -> None:
    before = _policy_snapshot(policy)
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="approval_policy.deleted",
        target=policy,
        before=before,
    )
    ApprovalPolicy.objects.for_tenant(actor.tenant).filter(pk=policy.pk).delete()


@transaction.atomic
def group_create(*, actor: Principal, name: str) -> ApproverGroup:
    group = ApproverGroup.objects.create(tenant=actor.tenant, name=name)
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="approver_group.created",
        target=group,
        after={"name": name},
    )
    return group


@transaction.atomic
def group_set_members(*, actor: Principal, group: ApproverGroup, users: list[Any]) -> None:
    """Make the group's members exactly `users` (people of the tenant)."""
    members = ApproverGroupMember.objects.for_tenant(actor.tenant).filter(group=group)
    before = sorted(members.values_list("user__username", flat=True))
    wanted = {u.pk: u for u in users}
    members.exclude(user_id__in=wanted).delete()
    have = set(members.values_list("user_id", flat=True))
    ApproverGroupMember.objects.bulk_create(
        ApproverGroupMember(tenant=actor.tenant, group=group, user=user)
        for pk, user in wanted.items()
        if pk not in have
    )
    after = sorted(u.get_username() for u in users)
    if before != after:
        audit_record(
            tenant=actor.tenant,
            actor=actor,
            action="approver_group.members_changed",
            target=group,
            before={"members": before},
            after={"members": after},
        )


@transaction.atomic
def group_delete(*, actor: Principal, group: ApproverGroup) -> None:
    """Delete a group no policy and no pending request relies on."""
    in_use = (
        ApprovalPolicy.objects.for_tenant(actor.tenant).filter(approver_group=group).exists()
        or ApprovalRequest.objects.for_tenant(actor.tenant)
        .filter(approver_group=group, status=ApprovalStatus.PENDING)
        .exists()
    )
    if in_use:
        raise GroupInUse()
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="approver_group.deleted",
        target=group,
        before={"name": group.name},
    )
    ApproverGroup.objects.for_tenant(actor.tenant).filter(pk=group.pk).delete()
