"""Twenty people decide one request at the same moment: one decision, one resume, 19 409s.

Each thread is a separate browser (or API client) on its own database connection; the
transactions really overlap in PostgreSQL, and only the conditional UPDATE decides.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import Client

from agents.runtime.models import Run
from approvals.models import ApprovalRequest
from tenants.models import AuditEvent, Role
from tenants.scope import tenant_scope
from tests import factories
from tests.approvals.conftest import REFUND, load_request, load_run, paused_refund

pytestmark = pytest.mark.django_db(transaction=True)
DECIDERS = 20


@pytest.fixture
def resumes(monkeypatch):
    """Every enqueue of a run (what resumes it), from any thread."""
    sent: list[str] = []
    lock = threading.Lock()

    def record(**kwargs) -> None:
        with lock:
            sent.append(str(kwargs["run_id"]))

    monkeypatch.setattr("agents.runtime.queue.enqueue_run", record)
    return sent


def race(clients: list[Client], send) -> list:
    """Start every client's request at the same instant; return the responses in order."""
    barrier = threading.Barrier(len(clients))
    responses: list = [None] * len(clients)

    def go(index: int, client: Client) -> None:
        try:
            barrier.wait(timeout=30)
            responses[index] = send(index, client)
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=go, args=(i, c)) for i, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return responses


def deciders(tenant) -> tuple[list[Client], list[str]]:
    clients, names = [], []
    for index in range(DECIDERS):
        role = Role.MANAGER if index % 2 else Role.ADMIN
        membership = factories.make_member(tenant, role)
        client = Client()
        client.force_login(membership.user)
        clients.append(client)
        names.append(membership.user.username)
    return clients, names


def assert_decided_once(tenant, run: Run, request: ApprovalRequest, responses, names, resumes):
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] + [409] * (DECIDERS - 1), codes
    winner = names[[r.status_code for r in responses].index(200)]
    decided = load_request(tenant, request.pk)
    assert (decided.status, decided.decided_by_label, decided.version) == ("approved", winner, 2)
    resumed = load_run(run)
    assert resumed.status == "queued" and resumed.wake_payload["decision"]["decided_by"] == winner
    assert resumes == [str(run.pk)], "exactly one resume"
    with tenant_scope(tenant.pk):
        decisions = AuditEvent.objects.for_tenant(tenant).filter(
            target_id=str(request.pk), action__in=["approval.approved", "approval.rejected"]
        )
        assert decisions.count() == 1
    return winner


def test_twenty_simultaneous_clicks_in_the_browser_decide_once(tenant_a, members, resumes):
    run, request = paused_refund(members["member"])
    clients, names = deciders(tenant_a)
    resumes.clear()  # starting the run enqueued it too
    url = f"/approvals/{request.pk}/decide/"
    responses = race(
        clients,
        lambda i, c: c.post(
            url, {"decision": "approve", "comment": f"#{i}"}, HTTP_HX_REQUEST="true"
        ),
    )
    winner = assert_decided_once(tenant_a, run, request, responses, names, resumes)
    for response in responses:
        if response.status_code == 409:
            assert f"Already approved by {winner}." in response.content.decode()


def test_twenty_simultaneous_api_decisions_decide_once(tenant_a, members, resumes):
    run, request = paused_refund(members["member"])
    clients, names = deciders(tenant_a)
    resumes.clear()  # starting the run enqueued it too
    url = f"/api/v1/approvals/{request.pk}/decision"
    edited = {**REFUND, "amount": "250.00"}
    responses = race(
        clients,
        lambda i, c: c.post(
            url, {"approve": True, "arguments": edited}, content_type="application/json"
        ),
    )
    winner = assert_decided_once(tenant_a, run, request, responses, names, resumes)
    for response in responses:
        if response.status_code == 409:
            body = response.json()
            assert body["code"] == "approval_already_decided"
            assert (body["detail"]["status"], body["detail"]["decided_by"]) == (
                "approved",
                winner,
            )
            assert body["detail"]["edited_arguments"] == edited
