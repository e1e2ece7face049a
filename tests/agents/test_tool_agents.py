"""Tool-calling agents: the model's turns are steps, its tool calls go through the ledger,
covered tools pause for a person, and whatever goes wrong goes back to the model."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from agents.runtime import ToolAgent, register
from agents.runtime.llm import OpenAIChatModel
from agents.runtime.models import Checkpoint, ToolCall
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tenants.scope import tenant_scope
from tests import factories
from tests.agents import tool_agents_for_tests as desk
from tests.fakes.openai_server import FakeOpenAIServer, ok

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clear():
    desk.payments.clear()
    desk.lookups.clear()


@pytest.fixture
def finish_run(step, reload):
    def go(run, *, until=("succeeded", "failed", "cancelled", "waiting_approval")):
        for _ in range(30):
            step(run)
            run = reload(run)
            if run.status in until:
                return run
        raise AssertionError(f"run still {run.status}")

    return go


def ledger(run) -> list[ToolCall]:
    with tenant_scope(run.tenant_id):
        return list(ToolCall.objects.filter(run=run).order_by("seq", "call_index"))


def test_a_tool_agent_looks_up_in_parallel_refunds_once_and_answers(start, finish_run):
    run = finish_run(start("tool_desk", message="I was charged twice for A-1002"))

    assert run.status == "succeeded"
    assert run.output["answer"].startswith("Refunded 40.00 for A-1002 (rf-")
    assert run.output["turns"] == 3
    # Both lookups of the first turn ran; the refund went through the ledger exactly once.
    assert desk.lookups == {"A-1001": 1, "A-1002": 1}
    assert list(desk.payments.values()) == [1]
    [refund] = ledger(run)
    assert (refund.tool, refund.status, refund.arguments["amount"]) == (
        "pay_refund",
        "succeeded",
        "40.00",
    )


def test_the_model_sees_its_tool_results_in_the_openai_format(start, finish_run, reload):
    run = finish_run(start("tool_desk", message="refund A-1002"))
    with tenant_scope(run.tenant_id):
        appended = [c.appended for c in Checkpoint.objects.filter(run=run).order_by("seq")]
    exchange = [m for part in appended if part for m in part.get("exchange", [])]
    assert [m["role"] for m in exchange] == ["assistant", "tool", "tool", "assistant", "tool"]
    assert [c["function"]["name"] for c in exchange[0]["tool_calls"]] == ["lookup_order"] * 2
    assert exchange[1]["tool_call_id"] == exchange[0]["tool_calls"][0]["id"]


def test_an_unknown_tool_and_bad_arguments_go_back_to_the_model_and_the_run_goes_on(
    start, finish_run
):
    seen: list[list[dict]] = []

    def answer(results: list[dict]) -> dict:
        seen.append(results)
        return {"content": "Sorry, I could not do that."}

    register(
        ToolAgent(
            name="tool_desk_confused",
            instructions="x",
            tools=["lookup_order", "pay_refund"],
            model=lambda: desk.DeskModel([
                {"calls": [("delete_everything", {}), ("pay_refund", {"order": "A-1002"}),
                           ("lookup_order", {"order": 7})]},
                answer,
            ]),
        ),
        replace=True,  # each test (and parameter) defines it afresh
    )  # fmt: skip

    run = finish_run(start("tool_desk_confused", message="go"))

    assert run.status == "succeeded"
    unknown, missing, wrong_type = seen[0]
    assert "There is no tool named 'delete_everything'" in unknown["error"]
    assert "'amount' is a required property" in missing["error"]
    assert "order: 7 is not of type 'string'" in wrong_type["error"]
    assert desk.payments == {} and desk.lookups == {}


def test_a_model_that_never_answers_stops_at_the_turn_limit(start, finish_run):
    register(
        ToolAgent(
            name="tool_desk_looping",
            instructions="x",
            tools=["lookup_order"],
            max_turns=2,
            model=lambda: desk.DeskModel([{"calls": [("lookup_order", {"order": "A-1001"})]}]),
        ),
        replace=True,  # each test (and parameter) defines it afresh
    )

    run = finish_run(start("tool_desk_looping", message="go"))

    assert run.status == "succeeded"
    assert run.output == {"answer": None, "reason": "turn_limit", "turns": 2}
    assert desk.lookups == {"A-1001": 2}


def test_a_covered_tool_waits_for_a_manager_and_the_edited_arguments_are_what_runs(
    start, finish_run, tenant_a, enqueued
):
    run = finish_run(start("tool_desk_approved", message="refund A-1002"))
    assert run.status == "waiting_approval"
    assert desk.payments == {}
    with tenant_scope(tenant_a.pk):
        request = ApprovalRequest.objects.get(run=run)
    assert (request.action, request.arguments) == (
        "pay_refund",
        {"order": "A-1002", "amount": "40.00"},
    )
    assert request.amount == 40

    manager = factories.principal_for(factories.make_member(tenant_a, "manager"))
    with tenant_scope(tenant_a.pk):
        approval_decide(
            principal=manager,
            request=request,
            approve=True,
            edited_arguments={"order": "A-1002", "amount": "25.00"},
        )
    run = finish_run(run)

    assert run.status == "succeeded"
    assert "Refunded 25.00 for A-1002" in run.output["answer"]
    [refund] = ledger(run)
    assert refund.arguments["amount"] == "25.00"
    assert list(desk.payments.values()) == [1]


def test_a_declined_call_is_told_to_the_model_and_nothing_is_paid(start, finish_run, tenant_a):
    run = finish_run(start("tool_desk_approved", message="refund A-1002"))
    manager = factories.principal_for(factories.make_member(tenant_a, "manager"))
    with tenant_scope(tenant_a.pk):
        request = ApprovalRequest.objects.get(run=run)
        approval_decide(principal=manager, request=request, approve=False, comment="No.")
    run = finish_run(run)

    assert run.status == "succeeded"
    assert run.output["answer"] == "I could not refund: A manager declined this call."
    assert desk.payments == {} and ledger(run) == []


def test_the_same_agent_runs_against_an_openai_compatible_endpoint(start, finish_run):
    with FakeOpenAIServer() as server:
        server.enqueue(
            ok("", tool_calls=[
                {"id": "c1", "name": "lookup_order", "arguments": {"order": "A-1001"}},
                {"id": "c2", "name": "lookup_order", "arguments": {"order": "A-1002"}},
            ]),
            ok("", tool_calls=[
                {"id": "c3", "name": "pay_refund",
                 "arguments": {"order": "A-1002", "amount": "40.00"}},
            ]),
            ok("Refunded 40.00 for A-1002."),
        )  # fmt: skip
        register(
            ToolAgent(
                name="tool_desk_openai",
                instructions="You are a refund desk.",
                tools=["lookup_order", "pay_refund"],
                model=lambda: OpenAIChatModel(server.base_url, "sk-test", "fake-model", timeout=5),
            ),
            replace=True,  # each test (and parameter) defines it afresh
        )

        run = finish_run(start("tool_desk_openai", message="refund A-1002"))
        bodies: list[dict[str, Any]] = [r.body for r in server.requests]

    assert run.status == "succeeded" and run.output["answer"] == "Refunded 40.00 for A-1002."
    assert desk.lookups == {"A-1001": 1, "A-1002": 1} and list(desk.payments.values()) == [1]
    assert sorted(t["function"]["name"] for t in bodies[0]["tools"]) == [
        "lookup_order",
        "pay_refund",
    ]
    # The second call carries the first turn's calls and both results, in the wire format.
    tail = bodies[1]["messages"][-3:]
    assert tail[0]["tool_calls"][1]["id"] == "c2"
    assert [(m["role"], m["tool_call_id"]) for m in tail[1:]] == [("tool", "c1"), ("tool", "c2")]


# --- options: approval_when, input_context, extract_memory, memory_query -------------------------


def test_approval_when_pauses_the_calls_it_names_and_lets_the_others_through(
    start, finish_run, tenant_a
):
    asked: list[tuple[str, dict]] = []

    def over(limit: str):
        def rule(name: str, arguments: dict) -> bool:
            asked.append((name, arguments))
            return name == "pay_refund" and Decimal(arguments["amount"]) > Decimal(limit)

        return rule

    for name, limit in [("tool_desk_over_30", "30.00"), ("tool_desk_over_50", "50.00")]:
        register(
            ToolAgent(
                name=name,
                instructions="x",
                tools=["lookup_order", "pay_refund"],
                approval_when=over(limit),
                model=desk.DeskModel,
            ),
            replace=True,  # each test (and parameter) defines it afresh
        )

    paused = finish_run(start("tool_desk_over_30", message="refund A-1002"))
    assert paused.status == "waiting_approval" and desk.payments == {}
    with tenant_scope(tenant_a.pk):
        request = ApprovalRequest.objects.get(run=paused)
    assert (request.action, request.amount) == ("pay_refund", 40)

    through = finish_run(start("tool_desk_over_50", message="refund A-1002"))
    assert through.status == "succeeded" and list(desk.payments.values()) == [1]
    # Asked about every call (the lookups too), with the model's validated arguments.
    assert ("lookup_order", {"order": "A-1001"}) in asked
    assert ("pay_refund", {"order": "A-1002", "amount": "40.00"}) in asked


class Recorder(desk.DeskModel):
    """The desk's model, keeping the messages of every call."""

    calls: list[list[dict]] = []

    def chat(self, messages, *, tools=None, on_token=None):
        Recorder.calls.append(messages)
        return super().chat(messages, tools=tools, on_token=on_token)


def test_input_context_gives_the_model_the_listed_run_input_as_data_after_the_instructions(
    start, finish_run
):
    Recorder.calls = []
    register(
        ToolAgent(
            name="tool_desk_with_input",
            instructions="You are a refund desk.",
            tools=["lookup_order", "pay_refund"],
            input_context=["customer", "tier"],
            model=Recorder,
        ),
        replace=True,  # each test (and parameter) defines it afresh
    )

    run = finish_run(
        start("tool_desk_with_input", message="refund A-1002", customer="ada", secret="s3")
    )

    assert run.status == "succeeded" and len(Recorder.calls) == 3
    for messages in Recorder.calls:  # every turn: instructions, then the data, then the rest
        assert messages[0] == {"role": "system", "content": "You are a refund desk."}
        assert messages[1] == {"role": "system", "content": 'Run input (data): {"customer": "ada"}'}
        assert "s3" not in str(messages)  # only the listed keys


def test_extract_memory_reads_the_request_once_on_the_first_turn(start, finish_run, monkeypatch):
    from memory.facts.steps import StepMemory

    read: list[str] = []
    monkeypatch.setattr(StepMemory, "extract", lambda self, message=None: read.append(message))
    register(
        ToolAgent(
            name="tool_desk_remembering",
            instructions="x",
            tools=["lookup_order", "pay_refund"],
            extract_memory=True,
            model=desk.DeskModel,
        ),
        replace=True,  # each test (and parameter) defines it afresh
    )

    run = finish_run(start("tool_desk_remembering", message="refund A-1002, email me"))
    assert run.status == "succeeded" and read == ["refund A-1002, email me"]
    finish_run(start("tool_desk", message="refund A-1002"))  # off by default
    assert read == ["refund A-1002, email me"]


def test_memory_query_adds_its_words_to_what_memories_are_recalled_for(
    start, finish_run, monkeypatch
):
    from memory.facts.steps import StepMemory

    queries: list[str] = []
    real = StepMemory.recall

    def recall(self, query, budget=None):
        queries.append(query)
        return real(self, query, budget)

    monkeypatch.setattr(StepMemory, "recall", recall)
    register(
        ToolAgent(
            name="tool_desk_recalling",
            instructions="x",
            tools=["lookup_order", "pay_refund"],
            memory_query="How does the customer prefer to be contacted?",
            model=desk.DeskModel,
        ),
        replace=True,  # each test (and parameter) defines it afresh
    )

    finish_run(start("tool_desk_recalling", message="refund A-1002"))
    assert queries == ["refund A-1002 How does the customer prefer to be contacted?"] * 3


def test_a_fifty_turn_agents_checkpoints_stay_the_same_size_turn_after_turn(start, step, reload):
    register(
        ToolAgent(
            name="tool_desk_fifty",
            instructions="x",
            tools=["lookup_order"],
            max_turns=60,
            model=lambda: desk.DeskModel(
                [{"calls": [("lookup_order", {"order": "A-1001"})]}] * 50
                + [lambda results: {"content": f"Looked {len(results)} times."}]
            ),
        ),
        replace=True,  # each test (and parameter) defines it afresh
    )
    run = start("tool_desk_fifty", message="look")
    for _ in range(3):  # slices of many steps; the log is read once per slice
        step(run, slice_seconds=3600)
    run = reload(run)

    # The model saw every earlier call and result (DeskModel counts them to pick its turn).
    assert run.status == "succeeded" and run.output["answer"] == "Looked 50 times."
    assert desk.lookups == {"A-1001": 50}
    with tenant_scope(run.tenant_id):
        rows = list(Checkpoint.objects.filter(run=run).order_by("seq"))
    sizes: dict[str, list[int]] = {}
    for cp in rows[:-1]:  # the last one is the answer
        size = len(json.dumps(cp.state)) + len(json.dumps(cp.appended))
        sizes.setdefault(cp.step, []).append(size)
    for name, per_turn in sizes.items():
        later = per_turn[9:]  # from turn 10 the call ids have two digits
        assert len(per_turn) == 50 and max(later) - min(later) <= 8, (name, per_turn)
    exchange = [m for cp in rows for m in (cp.appended or {}).get("exchange", [])]
    assert len(exchange) == 100  # each call and each result stored once


def test_a_run_checkpointed_with_its_exchange_in_the_state_moves_it_into_its_log(
    start, step, reload
):
    """Runs checkpointed before the logs (their state held the whole exchange and
    transcript) carry on after an upgrade, and stop copying them."""
    run = start("tool_desk", message="refund A-1002")
    step(run, slice_seconds=0)  # the model's first turn: two lookups asked
    step(run, slice_seconds=0)  # the lookups made
    with tenant_scope(run.tenant_id):
        logs: dict[str, list] = {}
        for cp in list(Checkpoint.objects.filter(run=run).order_by("seq")):
            for key, items in (cp.appended or {}).items():
                logs[key] = [*logs.get(key, []), *items]
            Checkpoint.objects.filter(pk=cp.pk).update(state={**cp.state, **logs}, appended=None)
    for _ in range(5):
        step(run, slice_seconds=0)
    run = reload(run)

    assert run.status == "succeeded" and run.output["answer"].startswith("Refunded 40.00")
    assert desk.lookups == {"A-1001": 1, "A-1002": 1} and list(desk.payments.values()) == [1]
    with tenant_scope(run.tenant_id):
        later = list(Checkpoint.objects.filter(run=run, seq__gt=2).order_by("seq"))
    assert all("exchange" not in cp.state and "transcript" not in cp.state for cp in later)
    moved = later[0].appended["exchange"]
    assert [m["role"] for m in moved] == ["assistant", "tool", "tool", "assistant"]
