"""The approval services: policies applied at request time, one decision, rules, audit."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from approvals import policies
from approvals.errors import AlreadyDecided, InvalidArguments, InvalidDecision, NotAnApprover
from approvals.models import ApprovalRequest
from approvals.services import approval_decide, approval_requests_cancel_for_run
from tenants.principal import Principal
from tenants.scope import tenant_scope
from tests import factories
from tests.approvals.conftest import (
    REFUND,
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


def decide(membership_or_principal, request: ApprovalRequest, **kwargs) -> ApprovalRequest:
    actor = (
        membership_or_principal
        if isinstance(membership_or_principal, Principal)
        else principal(membership_or_principal)
    )
    kwargs.setdefault("approve", True)
    with tenant_scope(actor.tenant.pk):
        return approval_decide(principal=actor, request=request, **kwargs)


# --- the engine's pause, and the policy it meets --------------------------------------------------


def test_the_engine_pauses_the_demo_refund_with_a_request_that_names_who_started_it(
    members, enqueued
):
    run, request = paused_refund(members["member"])
    assert (run.status, run.waiting_for) == ("waiting_approval", str(request.pk))
    assert (request.action, request.arguments) == ("issue_refund", REFUND)
    assert request.amount == Decimal("400.00")
    assert request.reason.startswith("Refund 400.00 USD for order A-1001")
    assert request.started_by_id == members["member"].user_id
    assert request.started_by_label == members["member"].user.username
    assert (request.approver_role, request.four_eyes, request.on_expiry) == (
        "manager",
        False,
        "wait",
    )
    assert request.due_at is None and request.policy_id is None
    assert audit_actions(request) == ["approval.requested"]


def test_a_policy_sets_the_deadline_the_approvers_and_what_happens_then(members, enqueued):
    finance = add_group(members["admin"], "Finance", [members["manager"].user])
    policy = add_policy(
        members["admin"],
        approver_role="manager",
        approver_group=finance,
        four_eyes=True,
        expires_after_minutes=90,
        on_expiry="escalate",
    )
    before = timezone.now()
    _, request = paused_refund(members["member"])
    assert request.policy_id == policy.pk
    assert (request.approver_group_id, request.approver_group_name) == (finance.pk, "Finance")
    assert request.four_eyes and request.on_expiry == "escalate"
    expected = before + dt.timedelta(minutes=90)
    assert abs((request.due_at - expected).total_seconds()) < 30


def test_the_earlier_of_the_agents_deadline_and_the_policys_wins(members):
    add_policy(members["admin"], expires_after_minutes=60, on_expiry="reject")
    request = make_request(members["member"], due_in=dt.timedelta(minutes=5))
    assert request.due_at - timezone.now() < dt.timedelta(minutes=6)


def test_a_policy_for_any_action_applies_when_the_action_has_none(members):
    policy = add_policy(members["admin"], action="*", approver_role="admin")
    assert make_request(members["member"]).policy_id == policy.pk
    own = add_policy(members["admin"], action="issue_refund", approver_role="manager")
    assert make_request(members["member"]).policy_id == own.pk


def test_an_amount_at_or_below_the_threshold_is_approved_by_the_policy_and_resumes(
    members, enqueued, django_capture_on_commit_callbacks
):
    add_policy(members["admin"], amount_threshold=Decimal("500.00"))
    with tenant_scope(members["admin"].tenant_id):
        assert not policies.approval_required(
            tenant_id=members["admin"].tenant_id, action="issue_refund", amount=400
        )
        assert policies.approval_required(
            tenant_id=members["admin"].tenant_id, action="issue_refund", amount="500.01"
        )
    with django_capture_on_commit_callbacks(execute=True):
        run, request = paused_refund_or_resumed(members["member"])
    assert (request.status, request.decided_by_label) == ("approved", "policy")
    assert run.status == "queued"
    assert run.wake_payload["decision"]["approved"] is True
    assert [str(e["run_id"]) for e in enqueued][-1] == str(run.pk)
    assert audit_actions(request) == ["approval.requested", "approval.auto_approved"]


def paused_refund_or_resumed(membership):
    from agents.runtime.engine.runner import drive
    from agents.runtime.services import conversation_start
    from tests.approvals.conftest import DEMO_MESSAGE

    actor = principal(membership)
    with tenant_scope(actor.tenant.pk):
        run = conversation_start(principal=actor, agent="refund_desk", message=DEMO_MESSAGE)
    drive(tenant_id=str(actor.tenant.pk), run_id=run.pk, worker="w")
    with tenant_scope(actor.tenant.pk):
        request = ApprovalRequest.objects.for_tenant(actor.tenant).get(run=run)
    return load_run(run), request


def test_an_amount_above_the_threshold_or_unknown_still_waits(members):
    add_policy(members["admin"], amount_threshold=Decimal("100"))
    assert make_request(members["member"], amount=100.01).status == "pending"
    assert make_request(members["member"], amount=None).status == "pending"
    assert make_request(members["member"], amount=100).status == "approved"


# --- deciding -------------------------------------------------------------------------------------


def test_an_approval_resumes_the_run_with_the_decision_once_committed(
    members, enqueued, django_capture_on_commit_callbacks
):
    run, request = paused_refund(members["member"])
    with django_capture_on_commit_callbacks(execute=True):
        decided = decide(members["manager"], request, comment="ok")
    assert (decided.status, decided.decided_by_id, decided.comment) == (
        "approved",
        members["manager"].user_id,
        "ok",
    )
    run = load_run(run)
    assert (run.status, run.waiting_for) == ("queued", "")
    decision = run.wake_payload["decision"]
    assert decision == {
        "approved": True,
        "comment": "ok",
        "request_id": str(request.pk),
        "arguments": REFUND,
        "edited": False,
        "decided_by": members["manager"].user.username,
    }
    assert [str(e["run_id"]) for e in enqueued] == [str(run.pk)]
    assert audit_actions(request) == ["approval.requested", "approval.approved"]


def test_approving_with_edited_arguments_hands_them_to_the_run_and_audits_the_edit(members):
    run, request = paused_refund(members["member"])
    edited = {**REFUND, "amount": "250.00"}
    decided = decide(members["manager"], request, edited_arguments=edited)
    assert decided.edited_arguments == edited
    decision = load_run(run).wake_payload["decision"]
    assert (decision["arguments"], decision["edited"]) == (edited, True)
    assert audit_actions(request) == [
        "approval.requested",
        "approval.approved",
        "approval.arguments_edited",
    ]


def test_edited_arguments_equal_to_the_proposal_are_an_approval_as_proposed(members):
    run, request = paused_refund(members["member"])
    decided = decide(members["manager"], request, edited_arguments=dict(REFUND))
    assert decided.edited_arguments is None
    assert load_run(run).wake_payload["decision"]["edited"] is False


@pytest.mark.parametrize(
    "arguments,fields",
    [
        ({**REFUND, "amount": "lots"}, {"amount"}),
        ({**REFUND, "amount": 250}, {"amount"}),
        ({"customer": "c", "order": "A-1001"}, {"non_field_errors"}),
        ({**REFUND, "iban": "x"}, {"non_field_errors"}),
    ],
    ids=["bad-amount", "number-not-string", "missing", "unknown-field"],
)
def test_edited_arguments_that_break_the_schema_are_refused_and_nothing_is_decided(
    members, arguments, fields
):
    run, request = paused_refund(members["member"])
    with pytest.raises(InvalidArguments) as refused:
        decide(members["manager"], request, edited_arguments=arguments)
    assert set(refused.value.problems) == fields
    assert refused.value.as_dict()["fields"]["arguments"] == refused.value.problems
    assert load_request(run.tenant, request.pk).status == "pending"
    assert load_run(run).status == "waiting_approval"


@pytest.mark.parametrize("approve", ["yes", 1, None])
def test_a_decision_that_is_not_a_boolean_is_refused(members, approve):
    _, request = paused_refund(members["member"])
    with pytest.raises(InvalidDecision):
        decide(members["manager"], request, approve=approve)


def test_a_rejection_cannot_carry_edited_arguments(members):
    _, request = paused_refund(members["member"])
    with pytest.raises(InvalidDecision):
        decide(members["manager"], request, approve=False, edited_arguments=dict(REFUND))


def test_the_second_decider_is_told_who_decided_what(members):
    run, request = paused_refund(members["member"])
    stale = load_request(run.tenant, request.pk)
    decide(members["manager"], request, approve=False, comment="not a duplicate")
    with pytest.raises(AlreadyDecided) as lost:
        decide(members["admin"], stale)
    assert lost.value.status == 409
    assert lost.value.message == f"Already rejected by {members['manager'].user.username}."
    assert lost.value.detail["comment"] == "not a duplicate"
    assert load_run(run).wake_payload["decision"]["approved"] is False


def test_cancelling_the_run_cancels_its_request_and_audits_it(members):
    run, request = paused_refund(members["member"])
    with tenant_scope(run.tenant_id):
        assert approval_requests_cancel_for_run(tenant_id=run.tenant_id, run_id=run.pk) == 1
    assert load_request(run.tenant, request.pk).status == "cancelled"
    assert audit_actions(request)[-1] == "approval.cancelled"


# --- who may decide -------------------------------------------------------------------------------


def test_four_eyes_keeps_whoever_started_the_run_from_approving_it(members):
    add_policy(members["admin"], four_eyes=True)
    _, request = paused_refund(members["manager"])
    with pytest.raises(NotAnApprover, match="four-eyes"):
        decide(members["manager"], request)
    assert decide(members["admin"], request).status == "approved"


def test_an_admins_only_policy_refuses_managers(members):
    add_policy(members["admin"], approver_role="admin")
    _, request = paused_refund(members["member"])
    with pytest.raises(NotAnApprover, match="admins only"):
        decide(members["manager"], request)
    assert decide(members["admin"], request).status == "approved"


def test_a_group_policy_refuses_people_outside_the_group_even_admins(members, tenant_a):
    other = factories.make_member(tenant_a, "manager")
    add_group_and_policy = add_group(members["admin"], "Finance", [other.user])
    add_policy(members["admin"], approver_group=add_group_and_policy)
    _, request = paused_refund(members["member"])
    for outside in (members["manager"], members["admin"]):
        with pytest.raises(NotAnApprover, match="Finance"):
            decide(outside, request)
    assert decide(other, request).status == "approved"


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_roles_without_the_approve_scope_cannot_decide(members, role):
    _, request = paused_refund(members["member"])
    with pytest.raises(NotAnApprover):
        decide(members[role], request)


def test_api_keys_decide_with_the_approve_scope_but_not_group_or_admin_only_requests(
    members, tenant_a
):
    approve_key = factories.make_api_key(tenant_a, ["read", "approve"]).key
    admin_key = factories.make_api_key(tenant_a, ["read", "approve", "admin"]).key
    as_key = Principal.for_api_key(approve_key, tenant_a)
    as_admin_key = Principal.for_api_key(admin_key, tenant_a)
    _, request = paused_refund(members["member"])
    assert policies.refusal(as_key, request) is None
    add_policy(members["admin"], approver_role="admin")
    _, admins_only = paused_refund(members["member"])
    assert policies.refusal(as_key, admins_only) == "This request is for admins only."
    assert policies.refusal(as_admin_key, admins_only) is None


def test_the_decidable_filter_agrees_with_the_rules_for_every_role(members, tenant_a):
    finance = add_group(members["admin"], "Finance", [members["manager"].user])
    rows = [paused_refund(members["member"])[1]]
    add_policy(members["admin"], approver_role="admin")
    rows.append(paused_refund(members["member"])[1])
    with tenant_scope(tenant_a.pk):
        policies.policy_update(
            actor=principal(members["admin"]),
            policy=policies.policy_for(tenant_id=tenant_a.pk, action="issue_refund"),
            approver_role="manager",
            approver_group=finance,
            four_eyes=True,
        )
    rows.append(paused_refund(members["manager"])[1])  # the manager started it: four eyes
    rows.append(paused_refund(members["admin"])[1])
    for role in ("admin", "manager", "member", "viewer"):
        actor = principal(members[role])
        with tenant_scope(tenant_a.pk):
            pending = ApprovalRequest.objects.for_tenant(tenant_a)
            by_filter = set(policies.decidable_by(actor, pending).values_list("pk", flat=True))
        by_rules = {r.pk for r in rows if policies.refusal(actor, r) is None}
        assert by_filter == by_rules, role


def test_a_request_keeps_the_rules_it_was_made_with_when_the_policy_changes(members, tenant_a):
    policy = add_policy(members["admin"], approver_role="admin")
    _, request = paused_refund(members["member"])
    with tenant_scope(tenant_a.pk):
        policies.policy_update(
            actor=principal(members["admin"]), policy=policy, approver_role="manager"
        )
    with pytest.raises(NotAnApprover):
        decide(members["manager"], load_request(tenant_a, request.pk))


def test_policy_and_group_changes_are_audited(members, tenant_a):
    from tenants.models import AuditEvent

    group = add_group(members["admin"], "Finance", [members["manager"].user])
    policy = add_policy(members["admin"], approver_group=group)
    actor = principal(members["admin"])
    with tenant_scope(tenant_a.pk):
        policies.policy_update(actor=actor, policy=policy, four_eyes=True)
        policies.policy_delete(actor=actor, policy=policy)
        policies.group_delete(actor=actor, group=group)
        actions = list(
            AuditEvent.objects.for_tenant(tenant_a)
            .filter(action__startswith="appro")
            .order_by("id")
            .values_list("action", flat=True)
        )
    assert actions == [
        "approver_group.created",
        "approver_group.members_changed",
        "approval_policy.created",
        "approval_policy.updated",
        "approval_policy.deleted",
        "approver_group.deleted",
    ]


def test_a_group_in_use_by_a_policy_or_a_pending_request_cannot_be_deleted(members, tenant_a):
    from approvals.errors import GroupInUse

    group = add_group(members["admin"], "Finance", [members["manager"].user])
    policy = add_policy(members["admin"], approver_group=group)
    paused_refund(members["member"])
    actor = principal(members["admin"])
    with tenant_scope(tenant_a.pk):
        policies.policy_delete(actor=actor, policy=policy)
        with pytest.raises(GroupInUse):
            policies.group_delete(actor=actor, group=group)
