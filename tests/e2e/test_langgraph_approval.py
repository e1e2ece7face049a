"""A LangGraph graph running outside AgentState asks for approval with `interrupt()`; a
manager approves it in the browser; the graph resumes with the decision."""

from __future__ import annotations

import re
from typing import TypedDict

import pytest
from agentstate_client import AgentStateSaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from playwright.sync_api import expect

from tenants.models import Role
from tests import factories
from tests.e2e.conftest import htmx_settled, screenshot
from tests.e2e.test_console_basics import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


class Parcel(TypedDict, total=False):
    order: str
    outcome: dict


def ask(state: Parcel) -> Parcel:
    return {
        "outcome": interrupt(
            {
                "action": "ship_replacement",
                "arguments": {"order": state["order"], "carrier": "ups"},
                "reason": "The customer's parcel was lost in transit.",
            }
        )
    }


@pytest.fixture
def acme():
    tenant = factories.make_tenant("acme-lg")
    factories.make_member(tenant, Role.MANAGER, user=factories.make_user("mila"))
    return tenant


def test_a_manager_approves_a_langgraph_interrupt_in_the_browser_and_the_graph_resumes(
    page, console_url, acme
):
    saver = AgentStateSaver(console_url, factories.make_api_key(acme, ["read", "write"]).raw)
    builder = StateGraph(Parcel)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "parcel-77"}}
    assert "__interrupt__" in graph.invoke({"order": "A-1077"}, config)
    assert saver.decision(config) is None

    log_in(page, console_url, "mila")
    page.get_by_role("navigation", name="Main").get_by_role(
        "link", name=re.compile("^Approvals")
    ).click()
    row = page.locator("table.inbox tbody tr").filter(has_text="ship_replacement")
    expect(row).to_be_visible()
    # As a person would: once the page has loaded (its scripts may still touch the history,
    # which can cancel a navigation that started before them).
    page.wait_for_load_state("load")
    htmx_settled(page)
    row.get_by_role("link", name=re.compile("^Review")).click()
    expect(page).to_have_url(re.compile(r"/approvals/[0-9a-f-]{36}/$"))
    expect(page.locator(".reason")).to_contain_text("parcel was lost in transit")
    screenshot(page, "langgraph-approval")
    page.get_by_label("Comment", exact=True).fill("Send it again.")
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#decision")).to_contain_text("Approved by mila")

    decision = saver.decision(config)
    assert decision["approved"] is True and decision["comment"] == "Send it again."
    resumed = graph.invoke(Command(resume=decision), config)
    assert resumed["outcome"]["arguments"] == {"order": "A-1077", "carrier": "ups"}
