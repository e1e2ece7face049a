"""The nav badge's count (one SQL statement) says what policies.decidable_by says, for every
mix of approver role, group, escalation and the four-eyes rule, and every kind of approver."""

from __future__ import annotations

import itertools

from django.utils import timezone

from approvals.models import ApprovalRequest, ApprovalStatus, ApproverGroup, ApproverGroupMember
from approvals.policies import decidable_by
from approvals.selectors import decidable_count
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories


def test_the_badge_count_equals_the_decidable_by_rules_for_every_combination(tenant_a, tenant_b):
    admin = factories.make_member(tenant_a, Role.ADMIN)
    manager = factories.make_member(tenant_a, Role.MANAGER)
    grouped = factories.make_member(tenant_a, Role.MANAGER)
    viewer = factories.make_member(tenant_a, Role.VIEWER)
    with tenant_scope(tenant_a.pk):
        group = ApproverGroup.objects.create(tenant=tenant_a, name="refunds")
        ApproverGroupMember.objects.create(tenant=tenant_a, group=group, user=grouped.user)
        run = factories._run_row(tenant_a)
        starters = [None, admin.user, manager.user, grouped.user]
        for role, in_group, escalated, four_eyes, starter, status in itertools.product(
            ["manager", "admin"],
            [False, True],
            [False, True],
            [False, True],
            starters,
            [ApprovalStatus.PENDING, ApprovalStatus.APPROVED],
        ):
            ApprovalRequest.objects.create(
                tenant=tenant_a,
                run=run,
                checkpoint_seq=1,
                step="s",
                action="refund",
                status=status,
                approver_role=role,
                approver_group=group if in_group else None,
                escalated_at=timezone.now() if escalated else None,
                four_eyes=four_eyes,
                started_by=starter,
            )
    with tenant_scope(tenant_b.pk):  # another tenant's pending request never counts
        other = factories.make_member(tenant_b, Role.ADMIN)
        ApprovalRequest.objects.create(
            tenant=tenant_b,
            run=factories._run_row(tenant_b),
            checkpoint_seq=1,
            step="s",
            action="refund",
            started_by=other.user,
        )
    counts = {}
    for membership in (admin, manager, grouped, viewer):
        principal = factories.principal_for(membership)
        with tenant_scope(tenant_a.pk):
            pending = ApprovalRequest.objects.for_tenant(tenant_a).filter(
                status=ApprovalStatus.PENDING
            )
            expected = decidable_by(principal, pending).count()
            counts[membership.role, membership.pk] = decidable_count(principal)
            assert counts[membership.role, membership.pk] == expected, membership.role
    assert len(set(counts.values())) > 2  # the mix tells the approvers apart
