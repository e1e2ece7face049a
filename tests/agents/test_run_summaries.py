"""Runs you can tell apart: an agent declares a one-line summary of a run from its input and
output (agents/runtime/definitions.py), with a generic fallback that never raises into a page."""

from __future__ import annotations

import pytest

from agents.runtime.definitions import (
    Agent,
    RunSummary,
    finish,
    generic_summary,
    get_agent,
    register,
    run_summary,
)
from agents.runtime.models import Run
from tenants.scope import tenant_scope
from tests.agents.console_helpers import make_run

pytestmark = pytest.mark.django_db


def agent_with(summary) -> Agent:
    agent = Agent("summarised", version=1, first="go", summary=summary)
    agent.steps["go"] = lambda ctx: finish({})  # never run here
    return agent


def test_an_agent_declares_the_summary_of_its_runs_from_input_and_output():
    agent = agent_with(lambda run_input, output: RunSummary(f"Ship {run_input['item']}", "sent"))
    assert agent.summarize({"item": "lamp"}, {"ok": True}) == RunSummary("Ship lamp", "sent")
    assert str(agent.summarize({"item": "lamp"}, None)) == "Ship lamp → sent"


def test_a_summary_may_be_a_plain_line_and_keeps_the_generic_outcome():
    agent = agent_with(lambda run_input, output: "Ship a lamp")
    assert agent.summarize({}, {"outcome": "shipped"}) == RunSummary("Ship a lamp", "shipped")


@pytest.mark.parametrize(
    "message,output,expected",
    [
        (
            "Please refund $40 for order A-1002",
            {"answer": "Done: 40.00 refunded for order A-1002 (refund re_7).", "turns": 3},
            "Asked: refund 40.00 for A-1002 → refunded",
        ),
        (
            "Please refund $400 for order A-1001, I was charged twice",
            {"answer": "Done: 250.00 refunded for order A-1001 (refund re_8)."},
            "Asked: refund 400.00 for A-1001 → refunded 250.00",
        ),
        ("Please refund $400 for order A-1001", None, "Asked: refund 400.00 for A-1001"),
        (
            "Refund $1,250.5 on B-2002",
            {"answer": "I can't refund 1250.50 for B-2002: it doesn't match your billing history."},
            "Asked: refund 1250.50 for B-2002 → not refunded",
        ),
        (
            "refund $9 for A-1001",
            {"answer": "A manager reviewed your refund and declined it."},
            "Asked: refund 9.00 for A-1001 → declined by a manager",
        ),
        (
            "refund $9 for A-1001",
            {"answer": None, "reason": "turn_limit", "turns": 6},
            "Asked: refund 9.00 for A-1001 → gave up (turn limit)",
        ),
        ("Where is my parcel?", {"answer": "On its way."}, "Where is my parcel? → answered"),
        (
            "refund order a-1002 please",
            {"answer": "I see order A-1002, but I need the amount to look at a refund."},
            "refund order a-1002 please → not understood",
        ),
        ("refund 40 dollars on a-1002", None, "Asked: refund 40.00 for A-1002"),
    ],
)
def test_the_demo_refund_desk_summarises_a_run_as_amount_order_and_outcome(
    message, output, expected
):
    desk = get_agent("refund_desk")
    assert str(desk.summarize({"message": message, "customer": "ada"}, output)) == expected


def test_without_a_summary_the_first_line_of_the_message_and_the_outputs_outcome_show():
    line = generic_summary({"message": "\n  Where is   my order?\nIt is late."}, {"status": "late"})
    assert line == RunSummary("Where is my order?", "late")
    assert generic_summary({"message": "hi"}, {"answer": "Hello!\nHow can I help?"}).outcome == (
        "Hello!"
    )
    assert generic_summary({"customer": "ada"}, None) == RunSummary('{"customer": "ada"}', "")
    assert generic_summary({}, {"trail": ["one"]}) == RunSummary("(no input)", "")
    assert generic_summary({}, "done") == RunSummary("(no input)", "done")


def test_a_long_summary_is_cut_to_one_short_line():
    line = generic_summary({"message": "word " * 100}, {"answer": "x" * 500})
    assert len(line.what) <= 90 and line.what.endswith("…")
    assert len(line.outcome) <= 60 and line.outcome.endswith("…")


def boom(run_input, output):
    raise KeyError("customer")


@pytest.mark.parametrize("summary", [boom, lambda i, o: None, lambda i, o: "   ", lambda i, o: 42])
def test_a_summary_that_fails_or_says_nothing_falls_back_to_the_generic_one(summary, caplog):
    agent = agent_with(summary)
    assert agent.summarize({"message": "Refund please"}, {"outcome": "ok"}) == RunSummary(
        "Refund please", "ok"
    )
    if summary is boom:
        assert "the summary of agent 'summarised' failed" in caplog.text


def test_a_failing_summary_never_reaches_the_runs_page(client_for, tenant_a):
    register(agent_with(boom), replace=True)  # each run of the suite defines it afresh
    run = make_run(tenant_a, agent="summarised", status="succeeded", step_seq=0)
    with tenant_scope(tenant_a.pk):
        Run.objects.for_tenant(tenant_a).filter(pk=run.pk).update(input={"message": "Refund it"})
    response = client_for("admin").get("/runs/")
    assert response.status_code == 200
    assert ">Refund it</a>" in response.content.decode()


def test_a_run_of_an_agent_this_process_does_not_know_gets_the_generic_summary(tenant_a):
    run = make_run(tenant_a, agent="gone_agent", status="succeeded", step_seq=0)
    assert run_summary(run.agent, {"message": "Old request"}, {"result": "fine"}) == RunSummary(
        "Old request", "fine"
    )
