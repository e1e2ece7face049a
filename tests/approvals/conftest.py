"""Fixtures of the approvals tests: paused demo refunds, driven in-process by the real engine."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.utils import timezone

from agents.runtime.engine.runner import drive
from agents.runtime.models import Run
from agents.runtime.services import conversation_start
from approvals import policies
from approvals.models import ApprovalRequest
from approvals.services import approval_request_create
from tenants.scope import tenant_scope
from tests import factories

DEMO_MESSAGE = "Please refund $400 for order A-1001, I was charged twice"
REFUND = {"customer": "ada@example.com", "order": "A-1001", "amount": "400.00"}
HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def enqueued(monkeypatch):
    """Runs the decisions put on the queue (in-process tests do not run workers)."""
    sent: list[dict] = []
    monkeypatch.setattr("agents.runtime.queue.enqueue_run", lambda **kwargs: sent.append(kwargs))
    return sent


@pytest.fixture
def notified(monkeypatch):
    """Approval emails queued for the worker: (kwargs) of each notify task."""
    sent: list[dict] = []
    monkeypatch.setattr(
        "approvals.notifications.queue_notification", lambda kwargs, **_: sent.append(kwargs)
    )
    return sent


def principal(membership):
    return factories.principal_for(membership)


def paused_refund(membership, message: str = DEMO_MESSAGE) -> tuple[Run, ApprovalRequest]:
    """The demo refund desk, started by `membership`, driven by the engine until it pauses."""
    actor = principal(membership)
    with tenant_scope(actor.tenant.pk):
        run = conversation_start(
            principal=actor,
            agent="refund_desk",
            message=message,
            input={"customer": "ada@example.com"},
            title="ada@example.com",
        )
    result = drive(tenant_id=str(actor.tenant.pk), run_id=run.pk, worker="test-worker")
    assert result.status == "waiting_approval", result
    run = load_run(run)
    return run, load_request(actor.tenant, run.waiting_for)


def load_run(run: Run) -> Run:
    with tenant_scope(run.tenant_id):
        return Run.objects.for_tenant(run.tenant_id).get(pk=run.pk)


def load_request(tenant, pk) -> ApprovalRequest:
    with tenant_scope(tenant.pk):
        return ApprovalRequest.objects.for_tenant(tenant).select_related("run").get(pk=pk)


def make_request(
    membership,
    *,
    action: str = "issue_refund",
    arguments: dict | None = None,
    amount: Any = 400,
    due_in: dt.timedelta | None = None,
) -> ApprovalRequest:
    """A pending request on a queued run of `membership`, made through
    approval_request_create (so the tenant's policy applies), with the run put in the waiting
    state the engine leaves the demo in (paused by its second tools step, seq 4)."""
    actor = principal(membership)
    with tenant_scope(actor.tenant.pk):
        from agents.runtime.services import run_start

        run = run_start(principal=actor, agent="refund_desk", input={"customer": "ada"})
        request_id = uuid.uuid4()
        Run.objects.for_tenant(actor.tenant).filter(pk=run.pk).update(
            status="waiting_approval", waiting_for=str(request_id), current_step="tools"
        )
        request = approval_request_create(
            id=request_id,
            tenant_id=actor.tenant.pk,
            run_id=run.pk,
            checkpoint_seq=4,
            step="tools",
            action=action,
            arguments=dict(REFUND) if arguments is None else arguments,
            reason="Refund 400.00 USD for order A-1001: duplicate charge.",
            amount=amount,
            due_at=timezone.now() + due_in if due_in else None,
        )
    return load_request(actor.tenant, request.pk)


def add_policy(admin_membership, action: str = "issue_refund", **rules) -> Any:
    with tenant_scope(admin_membership.tenant_id):
        return policies.policy_create(actor=principal(admin_membership), action=action, **rules)


def add_group(admin_membership, name: str, users: list) -> Any:
    actor = principal(admin_membership)
    with tenant_scope(actor.tenant.pk):
        group = policies.group_create(actor=actor, name=name)
        policies.group_set_members(actor=actor, group=group, users=users)
    return group


def audit_actions(request: ApprovalRequest) -> list[str]:
    from approvals.selectors import approval_request_audit

    with tenant_scope(request.tenant_id):
        return [e.action for e in approval_request_audit(request)]
