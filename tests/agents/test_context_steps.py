"""Explainable context: a step packs its model call with ctx.pack, and the record of what
was included and dropped commits with the step, exactly once; the run page and API show it."""

from __future__ import annotations

import pytest
from django.db import connection

from agents.conversations.packing.build import Memory
from agents.runtime.definitions import Agent, RetryPolicy, finish, register
from agents.runtime.errors import LLMRateLimited
from agents.runtime.models import PackedContext
from agents.runtime.services import conversation_start
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.test_api import count

pytestmark = pytest.mark.django_db(transaction=True)

packs = Agent(
    "packs_context",
    version=1,
    first="answer",
    retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02),
)


@packs.step
def answer(ctx):
    packed = ctx.pack(
        system="You are a refund desk. " * ctx.run_input.get("system_repeat", 1),
        current=ctx.run_input["message"],
        memories=[Memory("Prefers email", "preference", 0.9)],
        window=ctx.run_input.get("window", 8000),
        reserve_output=500,
    )
    if ctx.run_input.get("flaky") and ctx.attempt == 1:
        raise LLMRateLimited("429 after packing", retry_after=0)
    reply = ctx.llm.chat(packed.messages)
    ctx.say(reply.content)
    return finish({"messages_sent": len(packed.messages)})


register(packs)


def converse(principal, message: str, **run_input):
    with tenant_scope(principal.tenant.pk):
        return conversation_start(
            principal=principal, agent="packs_context", message=message, input=run_input
        )


def sections(record) -> dict:
    return {row["section"]: row for row in record.sections}


def records(run):
    with tenant_scope(run.tenant_id):
        return list(PackedContext.objects.for_tenant(run.tenant_id).filter(run=run))


def test_a_step_records_what_it_packed_once_with_the_step(admin, step, enqueued):
    run = converse(admin, "Please refund $40 for order A-1002")
    assert step(run).status == "succeeded"
    [record] = records(run)
    assert (record.seq, record.index, record.step) == (1, 0, "answer")
    assert record.budget == 7500 and 0 < record.tokens_used <= record.budget
    assert sections(record)["system"]["included"] == 1
    assert sections(record)["current"]["included"] == 1
    assert sections(record)["memory"]["tokens_included"] > 0
    reasons = {(i["section"], i["reason"]) for i in record.items}
    assert ("current", "must include") in reasons
    # The current turn was the conversation's own first message, sent once, not twice.
    assert sections(record)["current"]["included"] == 1 and "recent" not in sections(record)


def test_a_retried_step_records_its_context_only_with_the_attempt_that_persists(
    admin, step, enqueued
):
    run = converse(admin, "Please refund $40 for order A-1002", flaky=True)
    assert step(run).reason == "retrying"
    assert records(run) == []  # the failed attempt's record went nowhere
    connection.cursor().execute("SELECT pg_sleep(0.05)")
    assert step(run).status == "succeeded"
    assert len(records(run)) == 1


def test_must_includes_over_the_budget_fail_the_run_with_a_clear_error(
    admin, step, reload, enqueued
):
    run = converse(admin, "Please refund $40", system_repeat=400, window=1000)
    assert step(run).status == "failed"
    error = reload(run).error
    assert error["code"] == "context_budget_exceeded"
    assert "System prompt" in error["message"] and "budget is 500" in error["message"]
    assert records(run) == []


def test_the_demo_agent_builds_its_prompt_through_the_packer(admin, step, enqueued):
    with tenant_scope(admin.tenant.pk):
        run = conversation_start(
            principal=admin,
            agent="refund_desk",
            message="Please refund $400 for order A-1001, charged twice",
            input={"customer": "ada"},
        )
    step(run)  # model, tools (billing), model, tools: waits for a manager
    # Each model step packed its prompt once; the tools steps call no model.
    packed = records(run)
    assert [(r.seq, r.step) for r in packed] == [(1, "model"), (3, "model")]
    assert all(sections(r)["current"]["included"] == 1 for r in packed)


# --- run page and API -----------------------------------------------------------------------------


@pytest.fixture
def packed_run(members, step, enqueued):
    run = converse(factories.principal_for(members["member"]), "Please refund $40")
    step(run)
    return run


WHO = [("admin", 200), ("manager", 200), ("member", 200), ("viewer", 200), ("outsider", 404)]


@pytest.mark.parametrize("who, status", WHO)
def test_the_run_context_report_follows_the_role_matrix(client_for, packed_run, who, status):
    page = client_for(who).get(f"/runs/{packed_run.pk}/context/", headers={"HX-Request": "true"})
    assert page.status_code == status
    api = client_for(who).get(f"/api/v1/runs/{packed_run.pk}/context")
    assert api.status_code == status
    if status == 200:
        html = page.content.decode()
        assert "Step 1: <code>answer</code>" in html and "must include" in html
        assert "<html" not in html  # the partial for the run page
        [record] = api.json()
        assert [s["section"] for s in record["sections"]] == ["system", "memory", "current"]
        assert {i["reason"] for i in record["items"]} >= {"must include", "fits the budget"}


def test_the_run_page_shows_the_context_report_and_it_is_a_page_of_its_own(client_for, packed_run):
    client = client_for("admin")
    run_page = client.get(f"/runs/{packed_run.pk}/").content.decode()
    assert 'id="run-context"' in run_page and "Step 1: <code>answer</code>" in run_page
    full = client.get(f"/runs/{packed_run.pk}/context/").content.decode()
    assert "<html" in full and "Context sent to the model" in full


def test_another_members_run_context_is_404_to_a_member(client_for, tenant_a, step, enqueued):
    other = factories.principal_for(factories.make_member(tenant_a))
    run = converse(other, "mine")
    step(run)
    assert count(PackedContext, tenant_a, run=run) == 1
    assert client_for("member").get(f"/runs/{run.pk}/context/").status_code == 404
    assert client_for("member").get(f"/api/v1/runs/{run.pk}/context").status_code == 404
