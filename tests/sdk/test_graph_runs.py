"""A LangGraph thread's run has the graph's status and speaks its words: real graphs with
AgentStateSaver against the live server (agents/runtime/graph_runs.py)."""

from __future__ import annotations

import datetime as dt
import operator
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Annotated, TypedDict

import pytest
from agentstate_client import AgentStateSaver
from django.utils import timezone
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt

from agents.console import stuck
from agents.runtime.models import Checkpoint, ExternalCheckpoint, Run
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


class S(TypedDict, total=False):
    seen: Annotated[list[str], operator.add]
    out: object


def node(name):
    return lambda state: {"seen": [name]}


def ask(state: S) -> S:
    decision = interrupt(
        {"action": "refund", "arguments": {"order": "A-1"}, "reason": "Broken.", "amount": 40}
    )
    return {"out": decision}


def asking_graph(saver):
    b = StateGraph(S)
    b.add_node("a", node("a"))
    b.add_node("ask", ask)
    b.add_node("b", node("b"))
    b.add_edge(START, "a")
    b.add_edge("a", "ask")
    b.add_edge("ask", "b")
    return b.compile(checkpointer=saver)


@pytest.fixture
def key(tenant_a):
    return factories.make_api_key(tenant_a, ["read", "write"]).raw


@pytest.fixture
def saver(console_url, key) -> AgentStateSaver:
    return AgentStateSaver(console_url, key)


def root_run(tenant, thread: str) -> Run:
    with tenant_scope(tenant.pk):
        return Run.objects.get(session__title=thread, input__checkpoint_ns="")


def requests_of(tenant, thread: str) -> list[ApprovalRequest]:
    with tenant_scope(tenant.pk):
        return list(ApprovalRequest.objects.filter(run__session__title=thread))


def test_the_run_is_running_while_nodes_are_left_waits_on_the_interrupt_and_succeeds_at_end(
    saver, tenant_a
):
    config = {"configurable": {"thread_id": "status-1"}}
    during = []

    def watch(state: S) -> S:
        during.append(root_run(tenant_a, "status-1").status)
        return {"seen": ["watched"]}

    b = StateGraph(S)
    b.add_node("watch", watch)
    b.add_node("ask", ask)
    b.add_edge(START, "watch")
    b.add_edge("watch", "ask")
    graph = b.compile(checkpointer=saver)

    graph.invoke({"seen": []}, config, durability="sync")
    waiting = root_run(tenant_a, "status-1")
    [request] = requests_of(tenant_a, "status-1")
    assert during == ["running"]
    assert waiting.status == "waiting_approval" and waiting.waiting_for == str(request.pk)
    assert request.step == "ask"  # the node that asked

    manager = factories.principal_for(factories.make_member(tenant_a, "manager"))
    with tenant_scope(tenant_a.pk):
        approval_decide(principal=manager, request=request, approve=True, comment="ok")
    approved = root_run(tenant_a, "status-1")
    # Decided but not resumed: the graph has a node left, so it is not done.
    assert approved.status == "running" and approved.finished_at is None

    graph.invoke(Command(resume=saver.decision(config)), config)
    done = root_run(tenant_a, "status-1")
    assert done.status == "succeeded" and done.finished_at is not None
    with tenant_scope(tenant_a.pk):
        shown = Checkpoint.objects.filter(run=done).order_by("seq")
        steps = list(shown.values_list("step", flat=True))
    assert steps == ["input", "__start__", "watch", "ask"]


def test_a_graph_that_raises_fails_its_run_with_the_error(saver, tenant_a):
    def boom(state: S) -> S:
        raise ValueError("the ledger is closed")

    b = StateGraph(S)
    b.add_node("a", node("a"))
    b.add_node("boom", boom)
    b.add_edge(START, "a")
    b.add_edge("a", "boom")
    with pytest.raises(ValueError):
        b.compile(checkpointer=saver).invoke({"seen": []}, {"configurable": {"thread_id": "err"}})

    run = root_run(tenant_a, "err")
    assert run.status == "failed"
    assert run.error["code"] == "graph_error" and "the ledger is closed" in run.error["message"]


KILLED_GRAPH = textwrap.dedent(
    """
    import operator, pathlib, sys, time
    from typing import Annotated, TypedDict
    from agentstate_client import AgentStateSaver
    from langgraph.graph import START, StateGraph

    url, key, marker = sys.argv[1:4]

    class S(TypedDict):
        seen: Annotated[list[str], operator.add]

    def slow(state):
        pathlib.Path(marker).write_text("in slow")
        time.sleep(120)
        return {"seen": ["slow"]}

    b = StateGraph(S)
    b.add_node("a", lambda s: {"seen": ["a"]})
    b.add_node("slow", slow)
    b.add_node("b", lambda s: {"seen": ["b"]})
    b.add_edge(START, "a")
    b.add_edge("a", "slow")
    b.add_edge("slow", "b")
    graph = b.compile(checkpointer=AgentStateSaver(url, key))
    graph.invoke({"seen": []}, {"configurable": {"thread_id": "killed"}}, durability="sync")
    """
)


def test_a_graph_killed_between_nodes_stays_running_and_is_stuck_only_once_silent(
    console_url, key, tenant_a, tmp_path, client_for
):
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_GRAPH, console_url, key, str(marker)],
        env=os.environ.copy(),
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the graph never ran"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()

    run = root_run(tenant_a, "killed")
    with tenant_scope(tenant_a.pk):
        saved = ExternalCheckpoint.objects.filter(run=run).count()
        latest = Checkpoint.objects.get(run=run, seq=run.step_seq)
    assert saved == 3 and latest.step == "a" and latest.next_step == "slow"
    assert run.status == "running" and run.finished_at is None  # not succeeded

    with tenant_scope(tenant_a.pk):
        assert stuck.diagnose(run, timezone.now()) == []  # silent for a moment only
        later = timezone.now() + dt.timedelta(hours=1)
        assert [r.code for r in stuck.diagnose(run, later)] == ["graph_silent"]
        assert [r.code for r in stuck.reasons_in_python([run], later)[run.pk]] == ["graph_silent"]
    page = client_for("admin").get(f"/console/runs/{run.pk}/").content.decode()
    assert "Code missing" not in page
    for action in ("retry", "resume", "cancel", "replay", "state"):
        assert f"/console/runs/{run.pk}/{action}/" not in page


def test_a_subgraphs_interrupt_files_one_request_on_the_threads_run(saver, tenant_a):
    sb = StateGraph(S)
    sb.add_node("ask", ask)
    sb.add_node("c", node("c"))
    sb.add_edge(START, "ask")
    sb.add_edge("ask", "c")
    b = StateGraph(S)
    b.add_node("a", node("a"))
    b.add_node("sub", sb.compile())
    b.add_edge(START, "a")
    b.add_edge("a", "sub")
    graph = b.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "nested"}}

    graph.invoke({"seen": []}, config)

    run = root_run(tenant_a, "nested")
    [request] = requests_of(tenant_a, "nested")
    assert request.run_id == run.pk and request.status == "pending"
    assert run.status == "waiting_approval" and run.waiting_for == str(request.pk)

    manager = factories.principal_for(factories.make_member(tenant_a, "manager"))
    with tenant_scope(tenant_a.pk):
        approval_decide(principal=manager, request=request, approve=True)
    result = graph.invoke(Command(resume=saver.decision(config)), config)

    assert result["out"]["approved"] is True and result["seen"][-1] == "c"
    [after] = requests_of(tenant_a, "nested")
    assert after.status == "approved"
    assert root_run(tenant_a, "nested").status == "succeeded"


def test_resuming_with_its_own_command_closes_the_pending_request_with_an_audit_row(
    saver, tenant_a
):
    config = {"configurable": {"thread_id": "own-resume"}}
    graph = asking_graph(saver)
    graph.invoke({"seen": []}, config)
    [request] = requests_of(tenant_a, "own-resume")

    graph.invoke(Command(resume={"approved": True, "by": "a script"}), config)

    [closed] = requests_of(tenant_a, "own-resume")
    assert closed.status == "cancelled" and "Command(resume" in closed.comment
    with tenant_scope(tenant_a.pk):
        audit = AuditEvent.objects.filter(target_id=str(request.pk), action="approval.superseded")
        assert audit.count() == 1
    assert root_run(tenant_a, "own-resume").status == "succeeded"


def test_deleting_a_waiting_thread_cancels_its_request_with_an_audit_row(saver, tenant_a):
    config = {"configurable": {"thread_id": "deleted"}}
    asking_graph(saver).invoke({"seen": []}, config)
    [request] = requests_of(tenant_a, "deleted")

    saver.delete_thread("deleted")

    assert requests_of(tenant_a, "deleted") == []
    with tenant_scope(tenant_a.pk):
        assert AuditEvent.objects.filter(
            target_id=str(request.pk), action="approval.cancelled"
        ).exists()


def test_console_actions_that_drive_a_run_are_not_offered_and_are_refused(
    saver, tenant_a, client_for
):
    asking_graph(saver).invoke({"seen": []}, {"configurable": {"thread_id": "console"}})
    run = root_run(tenant_a, "console")
    admin = client_for("admin")

    page = admin.get(f"/console/runs/{run.pk}/").content.decode()
    listed = admin.get("/console/?stuck=any").content.decode()

    for action in ("retry", "resume", "cancel", "replay", "state", "release"):
        assert f"/console/runs/{run.pk}/{action}/" not in page
        answer = admin.post(
            f"/console/runs/{run.pk}/{action}/",
            {"version": run.version, "seen": run.event_seq, "state": "{}", "seq": 1, "mode": "new"},
        )
        assert answer.status_code == 409, (action, answer.status_code)
        assert "LangGraph thread" in answer.content.decode()
    assert "graph.update_state(config, values)" in page
    assert str(run.pk)[:8] not in listed  # a waiting graph is never stuck
    with tenant_scope(tenant_a.pk):
        fresh = Run.objects.get(pk=run.pk)
        assert stuck.diagnose(fresh, timezone.now() + dt.timedelta(days=3)) == []
    assert fresh.status == "waiting_approval"  # nothing changed it
    for action in ("retry", "resume", "cancel"):  # the list's bulk actions too
        admin.post(
            "/console/runs/bulk/",
            {"action": action, "runs": [f"{run.pk}:{fresh.version}:{fresh.event_seq}"]},
        )
    with tenant_scope(tenant_a.pk):
        assert Run.objects.get(pk=run.pk).status == "waiting_approval"
    user_page = admin.get(f"/runs/{run.pk}/").content.decode()
    assert "Cancel run" not in user_page
    cancel = client_for("admin").post(f"/runs/{run.pk}/cancel/")
    assert cancel.status_code == 409 and "LangGraph thread" in cancel.content.decode()


def test_lists_and_the_run_page_name_the_thread_and_its_nodes(saver, tenant_a, client_for):
    asking_graph(saver).invoke({"seen": []}, {"configurable": {"thread_id": "order-1042"}})
    run = root_run(tenant_a, "order-1042")
    admin = client_for("admin")

    for listed in (admin.get("/runs/"), admin.get("/console/")):
        text = listed.content.decode()
        assert "order-1042" in text
        assert "thread_id" not in text and "checkpoint_ns" not in text
    page = admin.get(f"/runs/{run.pk}/").content.decode()
    assert "loop 0" not in page and "input -1" not in page
    assert ">ask<" in page or " ask" in page
    inbox = client_for("manager").get("/approvals/").content.decode()
    assert "order-1042" in inbox
    # The step-time chart leaves out what was not timed here (a graph's run made it a 500).
    charts = admin.get("/runs/charts/?period=24h", HTTP_HX_REQUEST="true")
    assert charts.status_code == 200


def test_a_plain_interrupt_waits_for_an_event_that_only_the_graph_can_deliver(saver, tenant_a, key):
    from django.test import Client

    b = StateGraph(S)
    b.add_node("question", lambda state: {"out": interrupt("Which carrier?")})
    b.add_edge(START, "question")
    graph = b.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "plain"}}
    graph.invoke({"seen": []}, config)

    run = root_run(tenant_a, "plain")
    assert run.status == "waiting_event" and requests_of(tenant_a, "plain") == []
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    sent = api.post(
        f"/api/v1/runs/{run.pk}/events",
        {"name": run.waiting_for, "payload": {}},
        content_type="application/json",
    )
    assert sent.status_code == 409 and sent.json()["code"] == "run_driven_elsewhere"

    graph.invoke(Command(resume="dhl"), config)
    assert root_run(tenant_a, "plain").status == "succeeded"


def test_update_state_while_waiting_closes_the_request_it_moved_past(saver, tenant_a):
    config = {"configurable": {"thread_id": "updated"}}
    graph = asking_graph(saver)
    graph.invoke({"seen": []}, config)

    graph.update_state(config, {"seen": ["edited"]})

    [closed] = requests_of(tenant_a, "updated")
    assert closed.status == "cancelled" and "update_state" in closed.comment
    # The graph still has `ask` to run: it asks again when invoked, as a new request.
    assert root_run(tenant_a, "updated").status == "running"
    graph.invoke(None, config)
    assert sorted(r.status for r in requests_of(tenant_a, "updated")) == ["cancelled", "pending"]
