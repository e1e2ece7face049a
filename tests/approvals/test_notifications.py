"""Email to the people who may decide, queued when the request commits, with a link to it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from approvals.notifications import request_notify
from approvals.services import approval_decide
from approvals.tasks import notify_approvers
from tenants.scope import tenant_scope
from tests import factories
from tests.approvals.conftest import add_group, add_policy, make_request, principal

pytestmark = pytest.mark.django_db


@pytest.fixture
def emails(members, tenant_a):
    """Give every member of tenant A an address; one more manager and a manager elsewhere."""
    extra = factories.make_member(tenant_a, "manager", user=factories.make_user("mo"))
    people = {**members, "other_manager": extra}
    for role, membership in people.items():
        get_user_model().objects.filter(pk=membership.user_id).update(email=f"{role}@acme.example")
    elsewhere = factories.make_member(factories.make_tenant(), "manager")
    get_user_model().objects.filter(pk=elsewhere.user_id).update(email="else@globex.example")
    return people


def sent_to(mailoutbox) -> set[str]:
    return {address for m in mailoutbox for address in m.to}


def test_the_email_is_queued_on_commit(members, notified, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        request = make_request(members["member"])
    assert notified == [
        {"tenant_id": str(request.tenant_id), "request_id": str(request.pk), "kind": "requested"}
    ]


def test_managers_and_admins_get_one_email_each_with_a_link_to_the_request(
    emails, mailoutbox, settings
):
    settings.AGENTSTATE_CONSOLE_URL = "https://agents.example.com/"
    request = make_request(emails["member"])
    assert request_notify(tenant_id=request.tenant_id, request_id=request.pk) == 3
    assert sent_to(mailoutbox) == {
        "admin@acme.example",
        "manager@acme.example",
        "other_manager@acme.example",
    }
    assert all(len(m.to) == 1 for m in mailoutbox)
    message = mailoutbox[0]
    assert message.subject == "Approval needed: issue_refund for 400.00"
    assert f"https://agents.example.com/approvals/{request.pk}/" in message.body
    assert "Refund 400.00 USD for order A-1001" in message.body


def test_the_policy_narrows_who_is_emailed(emails, mailoutbox):
    finance = add_group(emails["admin"], "Finance", [emails["manager"].user, emails["admin"].user])
    add_policy(emails["admin"], approver_group=finance, four_eyes=True)
    request = make_request(emails["manager"])  # the manager started the run: four eyes
    request_notify(tenant_id=request.tenant_id, request_id=request.pk)
    assert sent_to(mailoutbox) == {"admin@acme.example"}


def test_an_admins_only_request_emails_only_admins(emails, mailoutbox):
    add_policy(emails["admin"], approver_role="admin")
    request = make_request(emails["member"])
    request_notify(tenant_id=request.tenant_id, request_id=request.pk)
    assert sent_to(mailoutbox) == {"admin@acme.example"}


def test_an_escalation_emails_the_admins(emails, mailoutbox):
    request = make_request(emails["member"])
    request_notify(tenant_id=request.tenant_id, request_id=request.pk, kind="escalated")
    assert sent_to(mailoutbox) == {"admin@acme.example"}
    assert mailoutbox[0].subject.startswith("Escalated to admins: issue_refund")


def test_nobody_is_emailed_about_a_request_that_was_decided_meanwhile(emails, mailoutbox):
    request = make_request(emails["member"])
    with tenant_scope(request.tenant_id):
        approval_decide(principal=principal(emails["manager"]), request=request, approve=True)
    assert request_notify(tenant_id=request.tenant_id, request_id=request.pk) == 0
    assert mailoutbox == []


def test_the_task_sends_through_the_email_backend(emails, mailoutbox):
    request = make_request(emails["member"])
    kwargs = {"tenant_id": str(request.tenant_id), "request_id": str(request.pk)}
    assert notify_approvers.apply(kwargs=kwargs).get() == 3
    assert len(mailoutbox) == 3
