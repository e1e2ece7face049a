"""The agents REST API: registry, sessions, runs, decisions; bad input changes nothing."""

from __future__ import annotations

import base64
import io
import json
import uuid
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client, RequestFactory
from django.utils import timezone

from agents.runtime import services
from agents.runtime.models import (
    AgentSession,
    Checkpoint,
    Message,
    Run,
    StepAttempt,
    ToolCall,
)
from approvals.models import ApprovalRequest
from approvals.services import approval_request_create
from tenants.models import AuditEvent, IdempotencyRecord
from tenants.principal import Principal
from tenants.scope import tenant_scope
from tests import factories
from tests.agents import agents_for_tests  # noqa: F401 - registers the test agents

REFUND = {"customer": "c-1", "order": "A-1001", "amount": "400.00"}


# --- helpers shared by the agents API tests -------------------------------------------------------


def post(client: Client, url: str, data: Any = None, **headers: str):
    """POST `data` as JSON (an empty object by default)."""
    return client.post(
        url, {} if data is None else data, content_type="application/json", headers=headers
    )


def count(model, tenant, **filters) -> int:
    with tenant_scope(tenant.pk):
        return model.objects.for_tenant(tenant).filter(**filters).count()


def fetch(model, tenant, pk):
    with tenant_scope(tenant.pk):
        return model.objects.for_tenant(tenant).get(pk=pk)


def open_session(membership, agent: str = "refund_desk") -> AgentSession:
    """A conversation of `membership`'s user."""
    with tenant_scope(membership.tenant_id):
        return services.session_create(
            principal=factories.principal_for(membership), agent=agent, title="help"
        )


def start_run(membership, agent: str = "refund_desk", session=None, **run_input) -> Run:
    with tenant_scope(membership.tenant_id):
        return services.run_start(
            principal=factories.principal_for(membership),
            agent=agent,
            input=run_input,
            session=session,
        )


def set_run(run: Run, **fields) -> Run:
    """Put a run in a state the engine would have left it in."""
    with tenant_scope(run.tenant_id):
        Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(**fields)
        run.refresh_from_db()
    return run


def waiting_for_approval(membership, *, arguments: dict | None = None, session=None) -> Run:
    """A refund_desk run paused on an approval request for issue_refund."""
    run = start_run(membership, session=session)
    request_id = uuid.uuid4()
    with tenant_scope(membership.tenant_id):
        approval_request_create(
            id=request_id,
            tenant_id=membership.tenant_id,
            run_id=run.pk,
            checkpoint_seq=4,
            step="tools",
            action="issue_refund",
            arguments=arguments or dict(REFUND),
            reason="Refund 400.00 USD for order A-1001",
            amount=400,
        )
    return set_run(
        run, status="waiting_approval", waiting_for=str(request_id), current_step="tools"
    )


def waiting_for_event(membership, name: str = "shipped", session=None) -> Run:
    run = start_run(membership, "pauses", session=session, kind="event")
    return set_run(run, status="waiting_event", waiting_for=name, current_step="after")


@pytest.fixture
def member(members):
    return members["member"]


@pytest.fixture
def manager(members):
    return members["manager"]


@pytest.fixture
def as_member(client_for):
    return client_for("member")


@pytest.fixture
def as_manager(client_for):
    return client_for("manager")


# --- the registry ---------------------------------------------------------------------------------


def test_the_registry_lists_each_agent_with_its_steps_and_versions(as_member):
    response = as_member.get("/api/v1/agents")
    assert response.status_code == 200
    agents = {a["name"]: a for a in response.json()}
    assert agents["refund_desk"] == {
        "name": "refund_desk",
        "version": 2,  # version 1 was the hand-written graph
        "description": agents["refund_desk"]["description"],
        "first_step": "model",
        "steps": ["model", "tools"],  # a tool-calling agent
        "state_version": 1,
    }
    assert agents["versioned"]["state_version"] == 2


# --- sessions -------------------------------------------------------------------------------------


def test_a_member_opens_a_conversation_for_themselves(as_member, member, tenant_a, enqueued):
    response = post(as_member, "/api/v1/sessions", {"agent": "refund_desk", "title": "Refund"})
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["agent"], body["title"], body["user"]) == (
        "refund_desk",
        "Refund",
        member.user.username,
    )
    assert fetch(AgentSession, tenant_a, body["id"]).user == member.user


def test_a_manager_may_open_a_conversation_for_a_member(as_manager, member, tenant_a):
    data = {"agent": "refund_desk", "user": member.user.username}
    response = post(as_manager, "/api/v1/sessions", data)
    assert response.status_code == 201
    assert response.json()["user"] == member.user.username


def test_an_api_key_may_open_a_conversation_for_a_member(tenant_a, member):
    key = factories.make_api_key(tenant_a, ["read", "write"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")
    response = post(
        client, "/api/v1/sessions", {"agent": "refund_desk", "user": member.user.username}
    )
    assert response.status_code == 201
    assert response.json()["user"] == member.user.username


def test_a_member_cannot_open_a_conversation_for_someone_else(as_member, manager, tenant_a):
    data = {"agent": "refund_desk", "user": manager.user.username}
    response = post(as_member, "/api/v1/sessions", data)
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"
    assert count(AgentSession, tenant_a) == 0


def test_a_conversation_for_a_stranger_is_refused_with_a_field_error(
    as_manager, outsider, tenant_a
):
    data = {"agent": "refund_desk", "user": outsider.user.username}
    response = post(as_manager, "/api/v1/sessions", data)
    assert response.status_code == 400
    assert set(response.json()["fields"]) == {"user"}
    assert count(AgentSession, tenant_a) == 0


def test_a_conversation_shows_its_transcript(as_member, member, tenant_a, enqueued):
    session = open_session(member)
    url = f"/api/v1/sessions/{session.pk}"
    first = post(as_member, f"{url}/messages", {"content": "I was charged twice"})
    assert first.status_code == 201
    posted = first.json()
    assert posted["message"]["content"] == "I was charged twice"
    assert posted["run"]["status"] == "queued"
    # A member's run is for themselves, as in the chat.
    assert posted["run"]["input"] == {
        "customer": member.user.username,
        "message": "I was charged twice",
    }
    assert posted["run"]["session"] == str(session.pk)
    detail = as_member.get(url).json()
    assert [(m["seq"], m["role"], m["content"]) for m in detail["messages"]] == [
        (1, "user", "I was charged twice")
    ]
    assert detail["last_seq"] == 1


def test_a_blank_message_is_refused(as_member, member, tenant_a):
    session = open_session(member)
    response = post(as_member, f"/api/v1/sessions/{session.pk}/messages", {"content": "  "})
    assert response.status_code == 400
    assert set(response.json()["fields"]) == {"content"}
    assert count(Message, tenant_a) == 0 and count(Run, tenant_a) == 0


def test_sessions_are_listed_newest_first_and_members_see_only_their_own(
    client_for, members, tenant_a
):
    mine = [open_session(members["member"]) for _ in range(3)]
    theirs = open_session(factories.make_member(tenant_a, "member"))
    listed = client_for("member").get("/api/v1/sessions?limit=2").json()
    assert [s["id"] for s in listed["results"]] == [str(mine[2].pk), str(mine[1].pk)]
    rest = client_for("member").get(f"/api/v1/sessions?before={listed['next']}").json()
    assert [s["id"] for s in rest["results"]] == [str(mine[0].pk)] and rest["next"] is None
    everyone = client_for("manager").get("/api/v1/sessions").json()["results"]
    assert str(theirs.pk) in {s["id"] for s in everyone}


# --- runs -----------------------------------------------------------------------------------------


def test_starting_a_run_queues_it_and_returns_it(as_manager, manager, tenant_a, enqueued):
    data = {"agent": "refund_desk", "input": {"customer": "c-1", "message": "hi"}}
    response = post(as_manager, "/api/v1/runs", data)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["status"], body["agent"], body["current_step"]) == (
        "queued",
        "refund_desk",
        "model",
    )
    assert body["input"] == data["input"] and body["created_by"] == manager.user.username
    assert count(Run, tenant_a) == 1


# Like the runs page's form, whose Customer field is read-only for members, and the chat: an
# end user's run is for themselves, whatever customer the body names.


@pytest.mark.parametrize(
    "run_input",
    [
        {"customer": "someone-else@example.com", "message": "refund them"},
        {"message": "refund me"},
        {"customer": "", "message": "refund me"},
    ],
    ids=["another-customer", "no-customer", "empty-customer"],
)
def test_a_members_api_run_is_for_themselves_whatever_customer_the_body_names(
    as_member, member, tenant_a, enqueued, run_input
):
    response = post(as_member, "/api/v1/runs", {"agent": "refund_desk", "input": run_input})
    assert response.status_code == 201, response.json()
    themselves = member.user.username
    assert response.json()["input"] == {**run_input, "customer": themselves}
    [run] = list_runs(tenant_a)
    assert run.input["customer"] == themselves and run.input["message"] == run_input["message"]
    with tenant_scope(tenant_a.pk):
        audit = AuditEvent.objects.for_tenant(tenant_a).get(action="run.started")
    assert audit.after["input"]["customer"] == themselves


def test_a_members_message_runs_for_themselves_when_the_last_run_was_for_someone_else(
    as_member, member, tenant_a, enqueued
):
    session = open_session(member)
    key = factories.make_api_key(tenant_a, ["read", "write"])
    with tenant_scope(tenant_a.pk):
        services.run_start(
            principal=Principal.for_api_key(key.key, tenant_a),
            agent="refund_desk",
            input={"customer": "bob", "message": "refund bob"},
            session=session,
        )
        Run.objects.filter(session=session).update(status="succeeded")

    url = f"/api/v1/sessions/{session.pk}/messages"
    response = post(as_member, url, {"content": "refund me"})

    assert response.status_code == 201, response.json()
    with tenant_scope(tenant_a.pk):
        newest = Run.objects.filter(session=session).order_by("-created_at").first()
    assert newest.input == {"customer": member.user.username, "message": "refund me"}


@pytest.mark.parametrize("who", ["manager", "admin"])
def test_managers_and_admins_start_api_runs_for_any_customer(client_for, tenant_a, enqueued, who):
    data = {"agent": "refund_desk", "input": {"customer": "c-9", "message": "hi"}}
    response = post(client_for(who), "/api/v1/runs", data)
    assert response.status_code == 201 and response.json()["input"] == data["input"]


def test_an_api_key_starts_runs_for_any_customer(tenant_a, enqueued):
    key = factories.make_api_key(tenant_a, ["read", "write"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")
    data = {"agent": "refund_desk", "input": {"customer": "c-9", "message": "hi"}}
    response = post(client, "/api/v1/runs", data)
    assert response.status_code == 201 and response.json()["input"] == data["input"]


def test_a_members_run_in_their_own_conversation_is_for_themselves_too(
    as_member, member, tenant_a, enqueued
):
    session = open_session(member)
    data = {"agent": "refund_desk", "session": str(session.pk), "input": {"customer": "c-9"}}
    response = post(as_member, "/api/v1/runs", data)
    assert response.status_code == 201
    assert response.json()["input"] == {"customer": member.user.username}


def list_runs(tenant) -> list[Run]:
    with tenant_scope(tenant.pk):
        return list(Run.objects.for_tenant(tenant))


def test_a_run_may_belong_to_a_conversation_of_the_same_agent(as_member, member, tenant_a):
    session = open_session(member)
    ok = post(as_member, "/api/v1/runs", {"agent": "refund_desk", "session": str(session.pk)})
    assert ok.status_code == 201 and ok.json()["session"] == str(session.pk)
    wrong = post(as_member, "/api/v1/runs", {"agent": "three_steps", "session": str(session.pk)})
    assert wrong.status_code == 400 and set(wrong.json()["fields"]) == {"session"}
    assert count(Run, tenant_a) == 1


def test_a_run_cannot_join_another_members_conversation(as_member, tenant_a):
    other = open_session(factories.make_member(tenant_a, "member"))
    response = post(as_member, "/api/v1/runs", {"agent": "refund_desk", "session": str(other.pk)})
    assert response.status_code == 400 and set(response.json()["fields"]) == {"session"}
    assert count(Run, tenant_a) == 0


def test_a_run_shows_checkpoints_attempts_with_tracebacks_ledger_and_approvals(
    as_manager, member, tenant_a
):
    run = waiting_for_approval(member)
    now = timezone.now()
    with tenant_scope(tenant_a.pk):
        Checkpoint.objects.create(
            tenant=tenant_a, run=run, seq=1, step="lookup", next_step="decide",
            state={"customer": "c-1"}, schema_version=1,
        )  # fmt: skip
        StepAttempt.objects.create(
            tenant=tenant_a, run=run, seq=2, attempt=1, step="decide", worker="w1",
            started_at=now, ended_at=now, outcome="retrying", error_class="LLMRateLimited",
            error_code="llm_rate_limited", message="429", traceback="Traceback: 429",
        )  # fmt: skip
        ToolCall.objects.create(
            tenant=tenant_a, run=run, seq=1, call_index=0, tool="billing_history",
            idempotency_key=f"{run.pk}:1:0", arguments={"customer": "c-1"}, status="succeeded",
            result={"orders": []}, sends=1,
        )  # fmt: skip
    body = as_manager.get(f"/api/v1/runs/{run.pk}").json()
    assert body["status"] == "waiting_approval"
    assert [(c["seq"], c["state"]) for c in body["checkpoints"]] == [(1, {"customer": "c-1"})]
    [attempt] = body["attempts"]
    assert (attempt["error_code"], attempt["traceback"]) == ("llm_rate_limited", "Traceback: 429")
    assert body["tool_calls"][0]["idempotency_key"] == f"{run.pk}:1:0"
    [approval] = body["approvals"]
    assert (approval["id"], approval["status"]) == (run.waiting_for, "pending")
    assert approval["arguments"] == REFUND


def test_runs_are_paginated_newest_first_with_a_stable_cursor(as_manager, member, tenant_a):
    runs = [start_run(member) for _ in range(5)]
    same_moment = timezone.now()
    for run in runs[1:4]:  # three runs created in the same microsecond
        set_run(run, created_at=same_moment)
    seen: list[str] = []
    url = "/api/v1/runs?limit=2"
    while url:
        page = as_manager.get(url).json()
        seen += [r["id"] for r in page["results"]]
        url = page["next"] and f"/api/v1/runs?limit=2&before={page['next']}"
    tied = sorted((str(r.pk) for r in runs[1:4]), reverse=True)
    assert seen == [*tied, str(runs[4].pk), str(runs[0].pk)]  # none skipped, none twice


def test_runs_are_filtered_by_status_and_agent(as_manager, member):
    queued = start_run(member)
    done = set_run(start_run(member, "three_steps"), status="succeeded")
    assert [r["id"] for r in as_manager.get("/api/v1/runs?status=succeeded").json()["results"]] == [
        str(done.pk)
    ]
    by_agent = as_manager.get("/api/v1/runs?agent=refund_desk").json()["results"]
    assert [r["id"] for r in by_agent] == [str(queued.pk)]


@pytest.mark.parametrize(
    "query,field",
    [("status=sleeping", "status"), ("limit=101", "limit"), ("limit=0", "limit"),
     ("before=not-a-cursor", "before")],
)  # fmt: skip
def test_bad_list_parameters_get_400_with_the_field_named(as_manager, query, field):
    response = as_manager.get(f"/api/v1/runs?{query}")
    assert response.status_code == 400
    assert set(response.json()["fields"]) == {field}


def test_a_cursor_whose_parts_have_the_wrong_types_is_a_400_not_a_500(as_manager):
    # Well-formed base64 JSON, but the id part is a number: uuid.UUID(5) raises AttributeError.
    for parts in (["2026-01-01T00:00:00+00:00", 5], [5, 5], ["2026-01-01T00:00:00+00:00"]):
        cursor = base64.urlsafe_b64encode(json.dumps(parts).encode()).decode()
        response = as_manager.get(f"/api/v1/runs?before={cursor}")
        assert response.status_code == 400
        assert set(response.json()["fields"]) == {"before"}


def test_cancelling_a_queued_run_cancels_it(as_member, member, tenant_a):
    run = start_run(member)
    response = post(as_member, f"/api/v1/runs/{run.pk}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert fetch(Run, tenant_a, run.pk).status == "cancelled"


def test_cancelling_a_finished_run_is_a_409_and_changes_nothing(as_member, member, tenant_a):
    run = set_run(start_run(member), status="succeeded")
    response = post(as_member, f"/api/v1/runs/{run.pk}/cancel")
    assert response.status_code == 409
    assert response.json()["code"] == "run_finished"
    assert fetch(Run, tenant_a, run.pk).version == run.version


def test_an_event_wakes_the_run_waiting_for_it(as_member, member, tenant_a):
    run = waiting_for_event(member)
    response = post(
        as_member, f"/api/v1/runs/{run.pk}/events", {"name": "shipped", "payload": {"n": 1}}
    )
    assert response.status_code == 200
    assert response.json()["status"] == "queued"
    assert fetch(Run, tenant_a, run.pk).wake_payload == {
        "event": {"name": "shipped", "payload": {"n": 1}}
    }


def test_an_event_the_run_does_not_wait_for_is_a_409(as_member, member, tenant_a):
    run = waiting_for_event(member)
    response = post(as_member, f"/api/v1/runs/{run.pk}/events", {"name": "delivered"})
    assert response.status_code == 409
    assert response.json()["detail"] == {"status": "waiting_event", "waiting_for": "shipped"}
    assert fetch(Run, tenant_a, run.pk).status == "waiting_event"


@pytest.mark.parametrize(
    "data",
    [{}, {"name": ""}, {"name": "   "}, {"name": "x" * 101}, {"name": "shipped", "payload": []},
     {"name": "shipped", "payload": "yes"}, {"name": "shipped", "payload": None}],
    ids=["missing", "blank", "spaces", "too-long", "payload-list", "payload-string",
         "payload-null"],
)  # fmt: skip
def test_a_malformed_event_gets_400_and_the_run_keeps_waiting(as_member, member, tenant_a, data):
    run = waiting_for_event(member)
    response = post(as_member, f"/api/v1/runs/{run.pk}/events", data)
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert set(response.json()["fields"]) <= {"name", "payload"}
    after = fetch(Run, tenant_a, run.pk)
    assert (after.status, after.version, after.wake_payload) == ("waiting_event", run.version, None)


# --- decisions ------------------------------------------------------------------------------------


def test_approving_resumes_the_run_with_the_decision(as_manager, manager, member, tenant_a):
    run = waiting_for_approval(member)
    response = post(
        as_manager, f"/api/v1/runs/{run.pk}/decision", {"approve": True, "comment": "ok"}
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["approval"]["status"] == "approved"
    assert body["approval"]["decided_by_label"] == manager.user.username
    assert body["run"]["status"] == "queued"
    decision = fetch(Run, tenant_a, run.pk).wake_payload["decision"]
    assert (decision["approved"], decision["arguments"], decision["edited"]) == (
        True,
        REFUND,
        False,
    )


def test_an_approval_may_edit_the_arguments_within_the_tools_schema(as_manager, member, tenant_a):
    run = waiting_for_approval(member)
    edited = {**REFUND, "amount": "200.00"}
    response = post(
        as_manager, f"/api/v1/runs/{run.pk}/decision", {"approve": True, "arguments": edited}
    )
    assert response.status_code == 200
    decision = fetch(Run, tenant_a, run.pk).wake_payload["decision"]
    assert (decision["arguments"], decision["edited"]) == (edited, True)


def test_rejecting_resumes_the_run_with_the_rejection(as_manager, member, tenant_a):
    run = waiting_for_approval(member)
    response = post(as_manager, f"/api/v1/runs/{run.pk}/decision", {"approve": False})
    assert response.status_code == 200
    assert response.json()["approval"]["status"] == "rejected"
    assert fetch(Run, tenant_a, run.pk).wake_payload["decision"]["approved"] is False


@pytest.mark.parametrize(
    "arguments,fields",
    [
        ({**REFUND, "amount": "a lot"}, {"amount"}),
        ({"customer": "c-1", "order": "A-1001"}, {"non_field_errors"}),
        ({**REFUND, "bank": "x"}, {"non_field_errors"}),
        ({**REFUND, "order": "B-1", "customer": ""}, {"order", "customer"}),
    ],
    ids=["bad-amount", "missing-field", "unknown-field", "two-bad-fields"],
)
def test_edited_arguments_that_break_the_tools_schema_get_400_and_nothing_is_decided(
    as_manager, member, tenant_a, arguments, fields
):
    run = waiting_for_approval(member)
    response = post(
        as_manager, f"/api/v1/runs/{run.pk}/decision", {"approve": True, "arguments": arguments}
    )
    assert response.status_code == 400
    assert set(response.json()["fields"]["arguments"]) == fields
    assert fetch(ApprovalRequest, tenant_a, run.waiting_for).status == "pending"
    assert fetch(Run, tenant_a, run.pk).status == "waiting_approval"


@pytest.mark.parametrize(
    "data",
    [{}, {"approve": "yes"}, {"approve": 1}, {"approve": False, "arguments": REFUND},
     {"approve": True, "arguments": ["not", "an", "object"]}],
    ids=["missing", "string", "number", "reject-with-arguments", "arguments-list"],
)  # fmt: skip
def test_a_malformed_decision_gets_400_and_nothing_is_decided(as_manager, member, tenant_a, data):
    run = waiting_for_approval(member)
    response = post(as_manager, f"/api/v1/runs/{run.pk}/decision", data)
    assert response.status_code == 400
    assert fetch(ApprovalRequest, tenant_a, run.waiting_for).status == "pending"


def test_a_decision_for_a_run_that_is_not_waiting_is_a_409_with_its_status(
    as_manager, member, tenant_a
):
    run = start_run(member)
    response = post(as_manager, f"/api/v1/runs/{run.pk}/decision", {"approve": True})
    assert response.status_code == 409
    assert response.json()["code"] == "run_not_waiting"
    assert response.json()["detail"] == {"status": "queued"}


def test_a_decision_that_loses_to_another_decider_is_a_409_naming_who_decided(
    as_manager, member, tenant_a
):
    run = waiting_for_approval(member)
    # The other decision committed between our read of the run and our update.
    with tenant_scope(tenant_a.pk):
        ApprovalRequest.objects.for_tenant(tenant_a).filter(pk=run.waiting_for).update(
            status="rejected", decided_by_label="carol", decided_at=timezone.now(), version=2
        )
    response = post(as_manager, f"/api/v1/runs/{run.pk}/decision", {"approve": True})
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "approval_already_decided"
    assert (body["detail"]["status"], body["detail"]["decided_by"]) == ("rejected", "carol")
    assert fetch(Run, tenant_a, run.pk).wake_payload is None


# --- bad input everywhere -------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/api/v1/runs", "/api/v1/sessions"])
def test_an_unknown_agent_gets_400_unknown_agent_and_writes_nothing(as_member, tenant_a, url):
    response = post(as_member, url, {"agent": "no_such_agent"})
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_agent"
    assert count(Run, tenant_a) == 0 and count(AgentSession, tenant_a) == 0


@pytest.mark.parametrize("value", [[1, 2], "refund", 3, None, True])
def test_run_input_that_is_not_an_object_gets_400_with_field_errors(as_member, tenant_a, value):
    response = post(as_member, "/api/v1/runs", {"agent": "refund_desk", "input": value})
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert set(response.json()["fields"]) == {"input"}
    assert count(Run, tenant_a) == 0


def test_malformed_json_gets_400_and_writes_nothing(as_member, tenant_a):
    response = as_member.post("/api/v1/runs", "{nope", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "malformed_request"
    assert count(Run, tenant_a) == 0


def test_a_body_over_the_limit_gets_413_and_writes_nothing(as_member, tenant_a, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    data = {"agent": "refund_desk", "input": {"blob": "x" * 4096}}
    response = post(as_member, "/api/v1/runs", data, **{"Idempotency-Key": "big"})
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert response.json()["detail"] == {"limit": 2048}
    assert count(Run, tenant_a) == 0 and count(IdempotencyRecord, tenant_a) == 0


def test_a_body_without_a_length_that_grows_too_big_gets_413(members, settings):
    # As an ASGI request with `Transfer-Encoding: chunked`: no Content-Length, only the
    # buffered body tells its size, and Django raises RequestDataTooBig while reading it.
    from agents.web.api import RunListView

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    membership = members["member"]
    request = RequestFactory().post("/api/v1/runs", b"{}", content_type="application/json")
    del request.META["CONTENT_LENGTH"]
    request._stream = io.BytesIO(b'{"agent": "' + b"x" * 4096 + b'"}')
    request.user = membership.user
    request.principal = Principal.for_member(
        tenant=membership.tenant, user=membership.user, role=membership.role
    )
    request._dont_enforce_csrf_checks = True
    response = RunListView.as_view()(request)
    assert response.status_code == 413
    assert response.data["code"] == "payload_too_large"


def test_an_unknown_run_or_session_is_a_json_404(as_manager):
    for url in (f"/api/v1/runs/{uuid.uuid4()}", f"/api/v1/sessions/{uuid.uuid4()}"):
        response = as_manager.get(url)
        assert response.status_code == 404 and response.json()["code"] == "not_found"


# --- the OpenAPI schema ---------------------------------------------------------------------------


def test_the_schema_documents_every_agents_endpoint(db):
    response = Client().get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    for path in (
        "/api/v1/agents",
        "/api/v1/sessions",
        "/api/v1/sessions/{session_id}",
        "/api/v1/sessions/{session_id}/messages",
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/runs/{run_id}/cancel",
        "/api/v1/runs/{run_id}/events",
        "/api/v1/runs/{run_id}/decision",
    ):
        assert path in schema["paths"]
    create = schema["paths"]["/api/v1/runs"]["post"]
    assert "Idempotency-Key" in {p["name"] for p in create["parameters"]}


def test_the_schema_generates_without_warnings(db, tmp_path):
    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "s.yml"))


# --- end to end, committed: the API drives a real pause and resume --------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_started_over_the_api_pauses_and_an_api_decision_resumes_it(
    client_for, step, enqueued
):
    started = post(
        client_for("member"), "/api/v1/runs", {"agent": "pauses", "input": {"kind": "approval"}}
    )
    assert started.status_code == 201
    run = Run(pk=started.json()["id"])
    assert [str(e["run_id"]) for e in enqueued] == [str(run.pk)]
    assert step(run).status == "waiting_approval"
    manager = client_for("manager")
    paused = manager.get(f"/api/v1/runs/{run.pk}").json()
    assert paused["status"] == "waiting_approval"
    assert [a["status"] for a in paused["approvals"]] == ["pending"]
    decided = post(
        manager,
        f"/api/v1/runs/{run.pk}/decision",
        {"approve": True, "arguments": {"name": "smaller refund"}},
        **{"Idempotency-Key": "decide-once"},
    )
    assert decided.status_code == 200, decided.json()
    assert len(enqueued) == 2  # the decision enqueued the run once its transaction committed
    assert step(run).status == "succeeded"
    done = manager.get(f"/api/v1/runs/{run.pk}").json()
    assert done["output"]["decision"]["arguments"] == {"name": "smaller refund"}
    assert [c["step"] for c in done["checkpoints"]] == ["ask", "after"]
    assert [a["outcome"] for a in done["attempts"]] == ["succeeded", "succeeded"]
    assert [a["status"] for a in done["approvals"]] == ["approved"]
