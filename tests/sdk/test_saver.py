"""AgentStateSaver (sdk/python) against the live server: the public LangGraph checkpointer
conformance suite, a real graph resuming from AgentState, and the thread on its pages."""

from __future__ import annotations

import asyncio
import concurrent.futures
import operator
from typing import Annotated, TypedDict

import pytest
from agentstate_client import AgentStateSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.graph import START, StateGraph

from agents.runtime.models import AgentSession, Checkpoint, ExternalCheckpoint, Run
from tenants.scope import tenant_scope
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def in_thread(coroutine):
    # An earlier test may have left an event loop running in this thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.fixture
def saver_factory(console_url, tenant_a):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    return lambda: AgentStateSaver(console_url, api_key=key)


def test_the_saver_passes_every_capability_of_the_conformance_suite(saver_factory):
    @checkpointer_test(name="AgentStateSaver")
    async def agentstate_saver():
        async with saver_factory() as saver:
            yield saver

    report = in_thread(validate(agentstate_saver, capabilities={c.value for c in ALL_CAPABILITIES}))

    failures = {
        name: [str(f)[:300] for f in result.failures]
        for name, result in report.results.items()
        if result.passed is False
    }
    assert failures == {}
    assert {name for name, r in report.results.items() if r.passed} == {
        c.value for c in ALL_CAPABILITIES
    }


class Tally(TypedDict):
    seen: Annotated[list[str], operator.add]


def test_a_graph_resumes_its_thread_from_agentstate_and_the_thread_is_a_session(
    saver_factory, tenant_a
):
    def first(state: Tally) -> Tally:
        return {"seen": ["first"]}

    def second(state: Tally) -> Tally:
        return {"seen": ["second"]}

    builder = StateGraph(Tally)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    config = {"configurable": {"thread_id": "order-1042"}}

    builder.compile(checkpointer=saver_factory()).invoke({"seen": []}, config)
    # Another process, another saver: the thread continues from what AgentState kept.
    again = builder.compile(checkpointer=saver_factory())
    result = again.invoke({"seen": ["more"]}, config)

    assert result["seen"] == ["first", "second", "more", "first", "second"]
    with tenant_scope(tenant_a.pk):
        session = AgentSession.objects.get(agent="langgraph", title="order-1042")
        [run] = Run.objects.filter(session=session)
        shown = list(Checkpoint.objects.filter(run=run).order_by("seq"))
        saved = ExternalCheckpoint.objects.filter(run=run).count()
    assert run.status == "succeeded" and len(shown) == saved >= 6
    assert shown[-1].state == {"seen": ["first", "second", "more", "first", "second"]}
    # Steps in the graph's words: the nodes that ran, not LangGraph's "loop 0".
    assert [c.step for c in shown][:4] == ["input", "__start__", "first", "second"]


def test_another_tenants_key_sees_nothing_of_the_thread(saver_factory, console_url, tenant_b):
    saver = saver_factory()
    builder = StateGraph(Tally)
    builder.add_node("first", lambda state: {"seen": ["x"]})
    builder.add_edge(START, "first")
    builder.compile(checkpointer=saver).invoke({"seen": []}, {"configurable": {"thread_id": "t"}})

    outsider = AgentStateSaver(console_url, factories.make_api_key(tenant_b, ["read", "write"]).raw)
    assert outsider.get_tuple({"configurable": {"thread_id": "t"}}) is None
    assert list(outsider.list(None)) == []
    outsider.delete_thread("t")  # nothing of theirs: nothing happens
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None


def test_the_threads_run_shows_on_the_run_page_and_in_the_console(
    saver_factory, client_for, tenant_a
):
    builder = StateGraph(Tally)
    builder.add_node("first", lambda state: {"seen": ["shown"]})
    builder.add_edge(START, "first")
    builder.compile(checkpointer=saver_factory()).invoke(
        {"seen": []}, {"configurable": {"thread_id": "visible"}}
    )
    with tenant_scope(tenant_a.pk):
        run = Run.objects.get(session__title="visible", agent="langgraph")
    admin = client_for("admin")

    page = admin.get(f"/runs/{run.pk}/")
    console = admin.get(f"/console/runs/{run.pk}/")
    listed = admin.get("/runs/")

    assert page.status_code == console.status_code == listed.status_code == 200
    assert "shown" in page.content.decode()
    assert str(run.pk)[:8] in listed.content.decode()


def test_the_langgraph_agent_cannot_be_started_or_talked_to_here(tenant_a, client_for):
    from django.test import Client

    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    for path, body in [
        ("/api/v1/runs", {"agent": "langgraph", "input": {}}),
        ("/api/v1/sessions", {"agent": "langgraph", "title": "t"}),
    ]:
        response = api.post(path, body, content_type="application/json")
        assert response.status_code == 400, response.content
        assert response.json()["code"] == "agent_not_startable"
    page = client_for("admin").get("/runs/").content.decode()
    start_form = page.split('id="start-form"')[1].split("</section>")[0]
    assert 'value="refund_desk"' in start_form and 'value="langgraph"' not in start_form


def test_saving_a_checkpoint_honours_an_idempotency_key(tenant_a):
    from django.test import Client

    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_IDEMPOTENCY_KEY="save-1")
    body = {"thread_id": "idem", "checkpoint_id": "1", "type": "json", "blob": "e30="}
    first = api.post("/api/v1/langgraph/checkpoints", body, content_type="application/json")
    again = api.post("/api/v1/langgraph/checkpoints", body, content_type="application/json")
    other = api.post(
        "/api/v1/langgraph/checkpoints",
        {**body, "checkpoint_id": "2"},
        content_type="application/json",
    )

    assert first.status_code == again.status_code == 201 and first.json() == again.json()
    assert other.status_code in (409, 422) and other.json()["code"].startswith("idempotency")
    with tenant_scope(tenant_a.pk):
        assert ExternalCheckpoint.objects.filter(thread_id="idem").count() == 1


def test_a_thread_id_with_slashes_spaces_and_question_marks_is_saved_and_deleted(saver_factory):
    saver = saver_factory()
    config = {"configurable": {"thread_id": "orders/1042 ?urgent"}}
    builder = StateGraph(Tally)
    builder.add_node("first", lambda state: {"seen": ["x"]})
    builder.add_edge(START, "first")
    builder.compile(checkpointer=saver).invoke({"seen": []}, config)
    assert saver.get_tuple(config) is not None

    saver.delete_thread("orders/1042 ?urgent")

    assert saver.get_tuple(config) is None
