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


def test_the_badge_counts_no_further_than_one_past_its_most_and_then_says_99_plus(tenant_a):
    from django.template.loader import render_to_string

    from approvals.selectors import BADGE_MOST

    admin = factories.make_member(tenant_a, Role.ADMIN)
    key = factories.principal_for(admin)
    with tenant_scope(tenant_a.pk):
        run = factories._run_row(tenant_a)
        ApprovalRequest.objects.bulk_create(
            ApprovalRequest(tenant=tenant_a, run=run, checkpoint_seq=n, step="s", action="refund")
            for n in range(5)
        )
        assert decidable_count(key) == 5
        assert decidable_count(key, at_most=2) == 3  # "2+": the rest is not read
        assert decidable_count(key, at_most=10) == 5
    many = render_to_string("approvals/_badge.html", {"approvals_badge": BADGE_MOST + 1})
    assert ">99+<" in many and "waiting for your decision" in many
    few = render_to_string("approvals/_badge.html", {"approvals_badge": BADGE_MOST})
    assert ">99<" in few


def test_a_large_backlogs_inbox_numbers_are_read_once_per_interval_and_a_small_ones_exactly(
    tenant_a, monkeypatch
):
    from agents.runtime.models import Run
    from approvals import selectors

    manager = factories.principal_for(factories.make_member(tenant_a, Role.MANAGER))

    def one_more_pending() -> None:
        with tenant_scope(tenant_a.pk):
            run = Run.objects.create(
                tenant=tenant_a, agent="refund_desk", agent_version=1, current_step="s",
                status="waiting_approval",
            )  # fmt: skip
            ApprovalRequest.objects.create(
                tenant=tenant_a, run=run, checkpoint_seq=1, step="s", action="refund"
            )

    def counted() -> tuple[int, int]:
        with tenant_scope(tenant_a.pk):
            counts = selectors.inbox_counts(manager)
            by_age = selectors.pending_by_age(manager, now=timezone.now())
        return counts["pending"], sum(ok + late for _, _, ok, late in by_age)

    one_more_pending()
    assert counted() == (1, 1)
    one_more_pending()
    assert counted() == (2, 2), "a small backlog is counted exactly"

    monkeypatch.setattr(selectors, "LARGE_BACKLOG", 1)  # two runs wait: a large backlog now
    assert counted() == (2, 2)
    one_more_pending()
    assert counted() == (2, 2), "read once per interval, shared meanwhile"
    monkeypatch.setattr(selectors._backlog, "seconds", 0)  # the interval has passed
    assert counted() == (3, 3)


def test_the_inbox_page_reads_the_tenants_run_counts_once_for_all_its_numbers(client_for):
    """Whether the backlog is large (and its numbers shared) is asked once per page, not once
    per number it shows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = client_for("manager")
    client.get("/approvals/")  # warm: sessions, templates
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/approvals/").status_code == 200
    run_counts = [q["sql"] for q in queries.captured_queries if "agents_runcount" in q["sql"]]
    assert len(run_counts) == 1, run_counts
