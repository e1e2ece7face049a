"""A LangGraph thread's run in the browser: the runs list names the thread, the run page
names its nodes and draws its wait for approval as one, the inbox names the thread, and the
console offers no action that would need AgentState to drive the graph."""

from __future__ import annotations

import operator
import re
import time
from typing import Annotated, TypedDict

import pytest
from agentstate_client import AgentStateSaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from playwright.sync_api import expect

from agents.runtime.models import Run
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories
from tests.e2e.conftest import screenshot
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


class Refund(TypedDict, total=False):
    order: str
    seen: Annotated[list[str], operator.add]
    outcome: dict


def look_up(state: Refund) -> Refund:
    time.sleep(0.3)
    return {"seen": ["looked up"]}


def ask(state: Refund) -> Refund:
    decision = interrupt(
        {
            "action": "refund",
            "arguments": {"order": state["order"], "amount": 40},
            "reason": "The item arrived broken.",
            "amount": 40,
        }
    )
    return {"outcome": decision}


def pay(state: Refund) -> Refund:
    time.sleep(0.2)
    return {"seen": ["paid"]}


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme-lgr")
    factories.make_member(tenant, Role.ADMIN, user=factories.make_user("ada"))
    return tenant


@pytest.fixture
def ada(acme):
    from tenants.models import Membership

    with tenant_scope(acme.pk):
        return factories.principal_for(Membership.objects.get(user__username="ada"))


def test_a_graphs_run_speaks_the_graphs_words_in_the_browser(page, console_url, acme, ada):
    saver = AgentStateSaver(console_url, factories.make_api_key(acme, ["read", "write"]).raw)
    builder = StateGraph(Refund)
    builder.add_node("look_up", look_up)
    builder.add_node("ask", ask)
    builder.add_node("pay", pay)
    builder.add_edge(START, "look_up")
    builder.add_edge("look_up", "ask")
    builder.add_edge("ask", "pay")
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "refund-A-1042"}}
    graph.invoke({"order": "A-1042", "seen": []}, config)
    with tenant_scope(acme.pk):
        run = Run.objects.get(session__title="refund-A-1042")
        request = ApprovalRequest.objects.get(run=run)

    log_in(page, console_url, "ada")
    page.goto(console_url + "/approvals/")
    row = page.locator("table.inbox tbody tr").filter(has_text="refund")
    expect(row).to_contain_text("refund-A-1042")
    screenshot(page, "langgraph-inbox")

    page.goto(console_url + "/runs/")
    listed = page.locator("tbody tr").filter(has_text="refund-A-1042")
    expect(listed).to_contain_text("Waiting for approval")
    expect(page.locator("main")).not_to_contain_text("thread_id")
    screenshot(page, "langgraph-runs")

    time.sleep(1.5)  # the wait for a person, on the waterfall
    page.goto(console_url + f"/runs/{run.pk}/")
    expect(page.locator("main")).to_contain_text("Waiting for approval")
    expect(page.locator(".current-step")).to_contain_text("ask")
    expect(page.locator("main")).not_to_contain_text("Cancel run")
    screenshot(page, "langgraph-run-waiting")
    with tenant_scope(acme.pk):
        approval_decide(principal=ada, request=request, approve=True, comment="Fine.")
    time.sleep(0.5)
    graph.invoke(Command(resume=saver.decision(config)), config)

    page.goto(console_url + f"/runs/{run.pk}/")
    main = page.locator("main")
    expect(main).to_contain_text("Succeeded")
    for step in ("look_up", "ask", "pay"):
        expect(page.locator(".timeline")).to_contain_text(step)
    expect(main).not_to_contain_text("loop 0")
    expect(page.locator("#run-waterfall")).to_contain_text("Waiting for approval")
    expect(page.locator("#run-waterfall")).not_to_contain_text("Queued for a worker")
    screenshot(page, "langgraph-run")

    page.goto(console_url + f"/console/runs/{run.pk}/")
    expect(page.locator("#console-actions")).to_contain_text("LangGraph thread")
    expect(page.get_by_role("button", name=re.compile("^(Replay|Save state|Retry)"))).to_have_count(
        0
    )
    screenshot(page, "langgraph-console-run")
