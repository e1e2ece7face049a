"""A tool-calling agent on real Celery workers: killed between the model's tool call and its
outcome, the run resumes on another worker and the refund happens exactly once."""

from __future__ import annotations

import pytest

from agents.demo.models import DemoRefund
from agents.runtime.models import ToolCall
from agents.runtime.services import run_start
from tenants.scope import tenant_scope
from tests.agents import tool_agents_for_tests  # noqa: F401  (registers tool_refund_desk here too)
from tests.agents.test_durability import load, wait_for_status
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
MODULES = {"AGENTSTATE_AGENT_MODULES": "agents.demo.refund_desk,tests.agents.tool_agents_for_tests"}


def start(principal):
    with tenant_scope(principal.tenant.pk):
        return run_start(
            principal=principal,
            agent="tool_refund_desk",
            input={"customer": "carol", "message": "I was charged twice for A-1002"},
        )


def test_a_tool_agent_on_a_real_worker_refunds_once(cluster, customer):
    cluster.worker("w1", **MODULES)
    run = wait_for_status(start(customer), {"succeeded", "failed"})
    assert run.status == "succeeded", run.error
    [refund] = DemoRefund.objects.filter(idempotency_key__startswith=str(run.pk))
    assert (refund.amount_cents, refund.requests) == (4000, 1)
    assert run.output["answer"] == f"Done: refund re_{refund.pk}."


def test_a_worker_killed_after_the_tools_call_returned_but_before_its_outcome_was_recorded(
    cluster, customer, failpoints
):
    failpoints("tool.after_call.issue_refund")
    cluster.beat()
    victim = cluster.worker("victim", **MODULES)
    run = start(customer)
    wait_until(lambda: not victim.alive(), timeout=30, what="the failpoint to kill the worker")
    cluster.worker("rescuer", **MODULES)
    run = wait_for_status(run, {"succeeded", "failed"}, timeout=60)

    assert run.status == "succeeded", run.error
    # The intent had no outcome, so the call went out again with the same key; the provider
    # recognised it: one refund, asked for twice.
    [refund] = DemoRefund.objects.filter(idempotency_key__startswith=str(run.pk))
    assert (refund.amount_cents, refund.requests) == (4000, 2)
    with tenant_scope(run.tenant_id):
        [call] = ToolCall.objects.filter(run=run)
    assert call.status == "succeeded"
    assert load(run).output["answer"] == f"Done: refund re_{refund.pk}."
