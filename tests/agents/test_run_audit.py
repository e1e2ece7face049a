"""The run page shows the audit trail of the run and its approvals."""

from __future__ import annotations

import pytest

from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tenants.scope import tenant_scope
from tests.agents import agents_for_tests  # noqa: F401 - registers the test agents

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_run_page_lists_the_request_and_the_decision_in_its_audit_trail(
    start, step, admin, tenant_a, client_for
):
    run = start("pauses", kind="approval")
    assert step(run).status == "waiting_approval"
    with tenant_scope(tenant_a.pk):
        request = ApprovalRequest.objects.for_tenant(tenant_a).get(run=run)
        approval_decide(principal=admin, request=request, approve=False, comment="too much")
    page = client_for("manager").get(f"/runs/{run.pk}/").content.decode()
    assert "Audit trail" in page
    for action in ("run.started", "approval.requested", "approval.rejected"):
        assert action in page
    assert "too much" in page


def test_another_tenants_manager_cannot_reach_the_audit_trail(start, step, client_for):
    run = start("pauses", kind="approval")
    step(run)
    assert client_for("outsider").get(f"/runs/{run.pk}/").status_code == 404
