"""Deadlines: the beat sweep expires or escalates on time, with a clock the test controls."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from approvals import policies
from approvals.errors import AlreadyDecided
from approvals.services import approval_decide, approval_requests_sweep_due
from approvals.tasks import sweep_deadlines
from tenants.scope import tenant_scope
from tests import factories
from tests.approvals.conftest import (
    add_group,
    add_policy,
    audit_actions,
    load_request,
    load_run,
    make_request,
    paused_refund,
    principal,
)

pytestmark = pytest.mark.django_db
HOUR = dt.timedelta(hours=1)


def test_before_the_deadline_the_sweep_changes_nothing(members):
    add_policy(members["admin"], expires_after_minutes=60, on_expiry="reject")
    run, request = paused_refund(members["member"])
    assert approval_requests_sweep_due(now=request.due_at - dt.timedelta(seconds=1)) == {
        "expired": 0,
        "escalated": 0,
    }
    assert load_request(run.tenant, request.pk).status == "pending"


def test_at_the_deadline_an_auto_reject_policy_expires_the_request_and_resumes_the_run(
    members, enqueued, django_capture_on_commit_callbacks
):
    add_policy(members["admin"], expires_after_minutes=60, on_expiry="reject")
    run, request = paused_refund(members["member"])
    with django_capture_on_commit_callbacks(execute=True):
        assert approval_requests_sweep_due(now=request.due_at) == {"expired": 1, "escalated": 0}
    expired = load_request(run.tenant, request.pk)
    assert (expired.status, expired.decided_by_label) == ("expired", "system: deadline")
    assert expired.decided_at == request.due_at
    run = load_run(run)
    assert run.status == "queued"
    decision = run.wake_payload["decision"]
    assert (decision["approved"], decision["expired"]) == (False, True)
    assert [str(e["run_id"]) for e in enqueued] == [str(run.pk)]
    assert audit_actions(request) == ["approval.requested", "approval.expired"]
    assert approval_requests_sweep_due(now=request.due_at + HOUR) == {"expired": 0, "escalated": 0}


def test_a_decision_after_the_expiry_is_a_409_naming_the_deadline(members):
    add_policy(members["admin"], expires_after_minutes=1, on_expiry="reject")
    run, request = paused_refund(members["member"])
    approval_requests_sweep_due(now=request.due_at + HOUR)
    with tenant_scope(run.tenant_id), pytest.raises(AlreadyDecided) as late:
        approval_decide(principal=principal(members["manager"]), request=request, approve=True)
    assert late.value.message == "Already expired by system: deadline."


def test_at_the_deadline_an_escalating_policy_lets_admins_decide_and_emails_them(
    members, tenant_a, notified, django_capture_on_commit_callbacks
):
    finance = add_group(members["admin"], "Finance", [members["manager"].user])
    add_policy(
        members["admin"], approver_group=finance, expires_after_minutes=30, on_expiry="escalate"
    )
    run, request = paused_refund(members["member"])
    admin = principal(members["admin"])
    assert "Finance" in policies.refusal(admin, request)
    with django_capture_on_commit_callbacks(execute=True):
        assert approval_requests_sweep_due(now=request.due_at + dt.timedelta(seconds=5)) == {
            "expired": 0,
            "escalated": 1,
        }
    escalated = load_request(tenant_a, request.pk)
    assert escalated.status == "pending" and escalated.escalated_at is not None
    assert policies.refusal(admin, escalated) is None
    assert policies.refusal(principal(members["manager"]), escalated) is None  # still in Finance
    assert notified[-1] == {
        "tenant_id": str(tenant_a.pk),
        "request_id": str(request.pk),
        "kind": "escalated",
    }
    assert audit_actions(request) == ["approval.requested", "approval.escalated"]
    # Escalated once: later sweeps leave it to the admins.
    assert approval_requests_sweep_due(now=request.due_at + 10 * HOUR)["escalated"] == 0
    with tenant_scope(tenant_a.pk):
        approval_decide(principal=admin, request=escalated, approve=True)
    assert load_run(run).status == "queued"


def test_a_keep_waiting_policy_leaves_an_overdue_request_pending(members):
    add_policy(members["admin"], expires_after_minutes=5, on_expiry="wait")
    run, request = paused_refund(members["member"])
    assert approval_requests_sweep_due(now=request.due_at + 24 * HOUR) == {
        "expired": 0,
        "escalated": 0,
    }
    assert load_request(run.tenant, request.pk).status == "pending"


def test_the_sweep_spans_tenants_and_leaves_decided_requests_alone(members, outsider):
    add_policy(members["admin"], expires_after_minutes=10, on_expiry="reject")
    add_policy(outsider, expires_after_minutes=10, on_expiry="reject")
    mine = make_request(members["member"])
    theirs = make_request(factories.make_member(outsider.tenant, "member"))
    decided = make_request(members["member"])
    with tenant_scope(decided.tenant_id):
        approval_decide(principal=principal(members["manager"]), request=decided, approve=True)
    later = timezone.now() + HOUR
    assert approval_requests_sweep_due(now=later) == {"expired": 2, "escalated": 0}
    assert load_request(members["admin"].tenant, mine.pk).status == "expired"
    assert load_request(outsider.tenant, theirs.pk).status == "expired"
    assert load_request(members["admin"].tenant, decided.pk).status == "approved"


def test_the_sweep_is_audited_as_a_system_context(members):
    from tenants.models import AuditEvent
    from tenants.scope import system_scope

    add_policy(members["admin"], expires_after_minutes=10, on_expiry="reject")
    make_request(members["member"])
    approval_requests_sweep_due(now=timezone.now() + HOUR)
    with system_scope("test_inspection"):
        event = AuditEvent.objects.filter(action="system.approval_deadlines").get()
    assert event.after == {"expired": 1, "escalated": 0}


def test_beat_runs_the_sweep_task(members):
    entry = settings.CELERY_BEAT_SCHEDULE["approval-deadlines"]
    assert entry["task"] == sweep_deadlines.name == "approvals.sweep_deadlines"
    assert entry["schedule"] <= 60
    add_policy(members["admin"], expires_after_minutes=1, on_expiry="reject")
    request = make_request(members["member"])
    with tenant_scope(request.tenant_id):
        from approvals.models import ApprovalRequest

        ApprovalRequest.objects.for_tenant(request.tenant_id).filter(pk=request.pk).update(
            due_at=timezone.now() - dt.timedelta(seconds=1)  # freeze time by moving the deadline
        )
    assert sweep_deadlines.apply().get() == {"expired": 1, "escalated": 0}
