"""A LangGraph `interrupt()` naming an action becomes an approval request in the inbox; the
manager's decision (edited arguments included) is what the resumed graph gets."""

from __future__ import annotations

from typing import TypedDict

import pytest
from agentstate_client import AgentStateSaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt

from agents.runtime.models import Run
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tenants.scope import tenant_scope
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class Refund(TypedDict, total=False):
    order: str
    outcome: dict


def ask(state: Refund) -> Refund:
    decision = interrupt(
        {
            "action": "ship_replacement",
            "arguments": {"order": state["order"], "carrier": "ups"},
            "reason": "The parcel was lost.",
            "amount": 120,
        }
    )
    return {"outcome": decision}


def graph_with(saver: AgentStateSaver):
    builder = StateGraph(Refund)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    return builder.compile(checkpointer=saver)


@pytest.fixture
def saver(console_url, tenant_a) -> AgentStateSaver:
    return AgentStateSaver(console_url, factories.make_api_key(tenant_a, ["read", "write"]).raw)


def test_an_interrupt_waits_in_the_inbox_and_the_edited_decision_resumes_the_graph(saver, tenant_a):
    config = {"configurable": {"thread_id": "lost-parcel"}}
    paused = graph_with(saver).invoke({"order": "A-1001"}, config)
    assert "__interrupt__" in paused

    with tenant_scope(tenant_a.pk):
        run = Run.objects.get(session__title="lost-parcel")
        [request] = ApprovalRequest.objects.filter(run=run)
    assert run.status == "waiting_approval" and run.waiting_for == str(request.pk)
    assert (request.action, request.arguments, request.reason) == (
        "ship_replacement",
        {"order": "A-1001", "carrier": "ups"},
        "The parcel was lost.",
    )
    assert saver.decision(config) is None

    manager = factories.principal_for(factories.make_member(tenant_a, "manager"))
    with tenant_scope(tenant_a.pk):
        approval_decide(
            principal=manager,
            request=request,
            approve=True,
            comment="Use DHL.",
            edited_arguments={"order": "A-1001", "carrier": "dhl"},
        )
        run.refresh_from_db()
    # Approved, not yet resumed: the graph's own process resumes it (never queued here), and
    # until it does the run has a node to run, so it is running, not succeeded.
    assert run.status == "running"

    decision = saver.decision(config)
    assert decision["approved"] is True and decision["comment"] == "Use DHL."
    assert decision["arguments"] == {"order": "A-1001", "carrier": "dhl"}

    # The graph's process resumes with the decision.
    result = graph_with(saver).invoke(Command(resume=decision), config)
    assert result["outcome"]["arguments"]["carrier"] == "dhl"
    with tenant_scope(tenant_a.pk):
        assert ApprovalRequest.objects.filter(run=run).count() == 1
        run.refresh_from_db()
    assert run.status == "succeeded"  # the graph reached its end
