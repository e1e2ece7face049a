"""Every agents endpoint for admin, manager, member, viewer and outsider, reading and acting.

The objects belong to the member (their conversation and its runs), so the member may act
on them. The outsider is an admin of another tenant: an id of tenant A is a 404 to it.
"""

from __future__ import annotations

import pytest
from django.test import Client

from agents.runtime.models import AgentSession, Run
from approvals.models import ApprovalRequest
from tests import factories
from tests.agents.test_api import (
    count,
    fetch,
    open_session,
    post,
    start_run,
    waiting_for_approval,
    waiting_for_event,
)

WHO = ["admin", "manager", "member", "viewer", "outsider"]


@pytest.fixture
def objects(members, enqueued):
    """The member's conversation, a queued run in it, and runs waiting in it."""
    member = members["member"]
    session = open_session(member)
    return {
        "session": session.pk,
        "run": start_run(member, session=session).pk,
        "approval_run": waiting_for_approval(member, session=session).pk,
        "event_run": waiting_for_event(member, session=session).pk,
    }


# --- reads ----------------------------------------------------------------------------------------

LISTS = ["/api/v1/agents", "/api/v1/sessions", "/api/v1/runs"]
DETAILS = ["/api/v1/sessions/{session}", "/api/v1/runs/{run}"]


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize("who", WHO)
def test_every_principal_may_read_the_lists_of_its_own_tenant(client_for, objects, url, who):
    assert client_for(who).get(url).status_code == 200


@pytest.mark.parametrize("url", LISTS + DETAILS)
def test_anonymous_callers_get_401(client_for, objects, url):
    response = client_for("anonymous").get(url.format(**objects))
    assert response.status_code == 401
    assert response.json()["code"] == "unauthenticated"


@pytest.mark.parametrize("url", DETAILS)
@pytest.mark.parametrize("who", WHO)
def test_details_are_read_by_the_tenant_and_are_404_to_the_outsider(client_for, objects, url, who):
    response = client_for(who).get(url.format(**objects))
    assert response.status_code == (404 if who == "outsider" else 200)


def test_the_outsiders_lists_never_include_tenant_a(client_for, objects):
    client = client_for("outsider")
    assert client.get("/api/v1/sessions").json()["results"] == []
    assert client.get("/api/v1/runs").json()["results"] == []


# --- acting ---------------------------------------------------------------------------------------

# (url, body, status for those allowed, who is allowed)
WRITERS = {"admin", "manager", "member"}
APPROVERS = {"admin", "manager"}
ACTS = [
    ("/api/v1/sessions", {"agent": "refund_desk"}, 201, WRITERS),
    ("/api/v1/sessions/{session}/messages", {"content": "hello"}, 201, WRITERS),
    ("/api/v1/runs", {"agent": "refund_desk", "input": {}}, 201, WRITERS),
    ("/api/v1/runs/{run}/cancel", {}, 200, WRITERS),
    ("/api/v1/runs/{event_run}/events", {"name": "shipped", "payload": {}}, 200, WRITERS),
    ("/api/v1/runs/{approval_run}/decision", {"approve": True}, 200, APPROVERS),
]


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("index", range(len(ACTS)), ids=[a[0] for a in ACTS])
def test_acting_follows_the_scopes_of_each_role_and_is_404_for_outsiders(
    client_for, objects, who, index
):
    template, body, allowed_status, allowed = ACTS[index]
    response = post(client_for(who), template.format(**objects), body)
    names_an_object = "{" in template
    if who == "outsider":
        # An admin elsewhere: acts in its own tenant, never on tenant A's objects.
        assert response.status_code == (404 if names_an_object else allowed_status)
    elif who in allowed:
        assert response.status_code == allowed_status, response.json()
    else:
        assert response.status_code == 403
        assert response.json()["code"] == "permission_denied"


def test_the_outsiders_actions_change_nothing_in_tenant_a(client_for, objects, tenant_a):
    client = client_for("outsider")
    post(client, f"/api/v1/runs/{objects['run']}/cancel")
    post(client, f"/api/v1/runs/{objects['event_run']}/events", {"name": "shipped"})
    post(client, f"/api/v1/runs/{objects['approval_run']}/decision", {"approve": True})
    post(client, f"/api/v1/sessions/{objects['session']}/messages", {"content": "hi"})
    assert fetch(Run, tenant_a, objects["run"]).status == "queued"
    assert fetch(Run, tenant_a, objects["event_run"]).status == "waiting_event"
    approval_run = fetch(Run, tenant_a, objects["approval_run"])
    assert fetch(ApprovalRequest, tenant_a, approval_run.waiting_for).status == "pending"
    assert fetch(AgentSession, tenant_a, objects["session"]).last_seq == 0


def test_a_viewers_refused_actions_change_nothing(client_for, objects, tenant_a):
    runs_before = count(Run, tenant_a)
    client = client_for("viewer")
    post(client, "/api/v1/runs", {"agent": "refund_desk"})
    post(client, f"/api/v1/runs/{objects['run']}/cancel")
    assert count(Run, tenant_a) == runs_before
    assert fetch(Run, tenant_a, objects["run"]).status == "queued"


# --- members see only their own -------------------------------------------------------------------


@pytest.fixture
def others(tenant_a, enqueued):
    """Another member's conversation and runs in the same tenant."""
    other = factories.make_member(tenant_a, "member")
    session = open_session(other)
    return {
        "session": session.pk,
        "run": start_run(other, session=session).pk,
        "event_run": waiting_for_event(other, session=session).pk,
    }


@pytest.mark.parametrize("url", ["/api/v1/sessions/{session}", "/api/v1/runs/{run}"])
def test_a_member_cannot_see_another_members_session_or_run(client_for, others, url):
    response = client_for("member").get(url.format(**others))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.parametrize(
    "url,body",
    [
        ("/api/v1/sessions/{session}/messages", {"content": "hi"}),
        ("/api/v1/runs/{run}/cancel", {}),
        ("/api/v1/runs/{event_run}/events", {"name": "shipped"}),
    ],
)
def test_a_member_cannot_act_on_another_members_session_or_run(
    client_for, others, tenant_a, url, body
):
    response = post(client_for("member"), url.format(**others), body)
    assert response.status_code == 404
    assert fetch(Run, tenant_a, others["run"]).status == "queued"
    assert fetch(Run, tenant_a, others["event_run"]).status == "waiting_event"


def test_a_members_lists_hold_only_their_own(client_for, objects, others):
    client = client_for("member")
    sessions = {s["id"] for s in client.get("/api/v1/sessions").json()["results"]}
    runs = {r["id"] for r in client.get("/api/v1/runs").json()["results"]}
    assert sessions == {str(objects["session"])}
    assert str(others["run"]) not in runs and str(objects["run"]) in runs
    everyone = {r["id"] for r in client_for("viewer").get("/api/v1/runs").json()["results"]}
    assert {str(others["run"]), str(objects["run"])} <= everyone


# --- API keys: scopes, not roles ------------------------------------------------------------------


@pytest.mark.parametrize(
    "scopes,read,write,decide",
    [
        (["read"], 200, 403, 403),
        (["read", "write"], 200, 201, 403),
        (["read", "write", "approve"], 200, 201, 200),
        (["admin"], 403, 403, 403),
    ],
)
def test_api_keys_act_as_their_scopes_allow(tenant_a, objects, scopes, read, write, decide):
    key = factories.make_api_key(tenant_a, scopes)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")
    assert client.get("/api/v1/runs").status_code == read
    assert post(client, "/api/v1/runs", {"agent": "refund_desk"}).status_code == write
    decision = post(client, f"/api/v1/runs/{objects['approval_run']}/decision", {"approve": True})
    assert decision.status_code == decide
