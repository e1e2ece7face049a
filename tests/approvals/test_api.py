"""The approvals API for integrations: list, get, decide (with Idempotency-Key), role matrix."""

from __future__ import annotations

import uuid

import pytest
from django.core.management import call_command
from django.test import Client

from tests import factories
from tests.approvals.conftest import (
    REFUND,
    add_policy,
    load_request,
    load_run,
    make_request,
    paused_refund,
)

pytestmark = pytest.mark.django_db
WHO = ["admin", "manager", "member", "viewer", "outsider"]


def post(client: Client, url: str, data=None, **headers):
    return client.post(
        url, {} if data is None else data, content_type="application/json", headers=headers
    )


def key_client(tenant, scopes: list[str]) -> Client:
    raw = factories.make_api_key(tenant, scopes).raw
    return Client(headers={"Authorization": f"Bearer {raw}"})


@pytest.fixture
def pending(members):
    return paused_refund(members["admin"])


# --- role matrix ----------------------------------------------------------------------------------

DETAIL = {"admin": 200, "manager": 200, "member": 404, "viewer": 200, "outsider": 404}
DECIDE = {"admin": 200, "manager": 200, "member": 403, "viewer": 403, "outsider": 404}


@pytest.mark.parametrize("who", WHO)
def test_the_list_answers_every_role_with_only_what_it_may_see(client_for, pending, who):
    _, request = pending
    response = client_for(who).get("/api/v1/approvals")
    assert response.status_code == 200
    ids = [r["id"] for r in response.json()["results"]]
    assert ids == ([str(request.pk)] if who in ("admin", "manager", "viewer") else [])


@pytest.mark.parametrize("who", WHO)
def test_one_request_is_404_outside_the_tenant_and_for_members_who_did_not_start_it(
    client_for, pending, who
):
    _, request = pending
    assert client_for(who).get(f"/api/v1/approvals/{request.pk}").status_code == DETAIL[who]


@pytest.mark.parametrize("who", WHO)
def test_deciding_needs_the_approve_scope_and_another_tenants_request_is_404(
    client_for, pending, tenant_a, who
):
    run, request = pending
    response = post(client_for(who), f"/api/v1/approvals/{request.pk}/decision", {"approve": True})
    assert response.status_code == DECIDE[who]
    status = load_request(tenant_a, request.pk).status
    assert status == ("approved" if DECIDE[who] == 200 else "pending")


@pytest.mark.parametrize("url", ["/api/v1/approvals", "/api/v1/approvals/{pk}"])
def test_anonymous_callers_get_401(client_for, pending, url):
    response = client_for("anonymous").get(url.format(pk=pending[1].pk))
    assert response.status_code == 401 and response.json()["code"] == "unauthenticated"


@pytest.mark.parametrize(
    "scopes,status", [(["read"], 403), (["read", "write"], 403), (["approve"], 200)]
)
def test_api_keys_decide_with_the_approve_scope(pending, tenant_a, scopes, status):
    _, request = pending
    client = key_client(tenant_a, scopes)
    response = post(client, f"/api/v1/approvals/{request.pk}/decision", {"approve": True})
    assert response.status_code == status
    if status == 200:
        assert response.json()["approval"]["decided_by"].startswith("api key ")


def test_a_decision_on_behalf_of_another_tenant_is_404_and_changes_nothing(
    pending, tenant_a, tenant_b
):
    _, request = pending
    client = key_client(tenant_b, ["read", "approve", "admin"])
    response = post(client, f"/api/v1/approvals/{request.pk}/decision", {"approve": True})
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert client.get(f"/api/v1/approvals/{request.pk}").status_code == 404
    assert client.get("/api/v1/approvals").json()["results"] == []
    assert load_request(tenant_a, request.pk).status == "pending"


# --- reading --------------------------------------------------------------------------------------


def test_a_request_carries_its_proposal_rules_and_run(client_for, members, pending):
    run, request = pending
    body = client_for("manager").get(f"/api/v1/approvals/{request.pk}").json()
    assert body["arguments"] == REFUND and body["amount"] == "400.00"
    assert (body["run"], body["run_agent"], body["run_status"]) == (
        str(run.pk),
        "refund_desk",
        "waiting_approval",
    )
    assert (body["approver_role"], body["four_eyes"], body["on_expiry"]) == (
        "manager",
        False,
        "wait",
    )
    assert body["started_by"] == members["admin"].user.username
    assert body["status"] == "pending" and body["decided_by"] == ""


def test_the_list_pages_with_a_cursor_and_filters(client_for, members):
    made = [make_request(members["member"]) for _ in range(5)]
    client = client_for("manager")
    first = client.get("/api/v1/approvals?limit=2").json()
    second = client.get(f"/api/v1/approvals?limit=2&after={first['next']}").json()
    third = client.get(f"/api/v1/approvals?limit=2&after={second['next']}").json()
    ids = [r["id"] for page in (first, second, third) for r in page["results"]]
    assert sorted(ids) == sorted(str(r.pk) for r in made) and third["next"] is None
    post(client, f"/api/v1/approvals/{made[0].pk}/decision", {"approve": False})
    decided = client.get("/api/v1/approvals?status=rejected").json()["results"]
    assert [r["id"] for r in decided] == [str(made[0].pk)]
    assert client.get("/api/v1/approvals?action=billing_history").json()["results"] == []


@pytest.mark.parametrize(
    "query", ["status=maybe", "limit=0", "limit=101", "after=xyz", "mine=perhaps"]
)
def test_a_malformed_list_query_is_400_with_the_field(client_for, query):
    response = client_for("manager").get(f"/api/v1/approvals?{query}")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert query.split("=")[0] in response.json()["fields"]


def test_an_unknown_or_malformed_id_is_a_json_404(client_for):
    client = client_for("manager")
    assert client.get(f"/api/v1/approvals/{uuid.uuid4()}").json()["code"] == "not_found"
    assert client.get("/api/v1/approvals/not-a-uuid").status_code == 404


# --- deciding -------------------------------------------------------------------------------------


def test_approving_with_edited_arguments_resumes_the_run_with_them(client_for, pending, tenant_a):
    run, request = pending
    edited = {**REFUND, "amount": "250.00"}
    response = post(
        client_for("manager"),
        f"/api/v1/approvals/{request.pk}/decision",
        {"approve": True, "comment": "partial", "arguments": edited},
    )
    assert response.status_code == 200
    body = response.json()
    assert body["approval"]["status"] == "approved"
    assert body["approval"]["edited_arguments"] == edited
    assert body["run"]["status"] == "queued"
    assert load_run(run).wake_payload["decision"]["arguments"] == edited


@pytest.mark.parametrize(
    "data,fields",
    [
        ({"approve": True, "arguments": {**REFUND, "amount": "lots"}}, {"arguments"}),
        ({"approve": "yes"}, {"approve"}),
        ({}, {"approve"}),
        ({"approve": False, "arguments": REFUND}, {"arguments"}),
        ({"approve": True, "arguments": [1]}, {"arguments"}),
        ({"approve": True, "comment": "x" * 5001}, {"comment"}),
    ],
    ids=["schema", "string", "missing", "reject-with-arguments", "list", "long-comment"],
)
def test_bad_input_is_400_with_the_fields_and_nothing_is_decided(
    client_for, pending, tenant_a, data, fields
):
    run, request = pending
    response = post(client_for("manager"), f"/api/v1/approvals/{request.pk}/decision", data)
    assert response.status_code == 400
    assert set(response.json()["fields"]) == fields
    assert load_request(tenant_a, request.pk).status == "pending"
    assert load_run(run).status == "waiting_approval"


def test_edited_arguments_report_each_bad_field(client_for, pending):
    _, request = pending
    bad = {**REFUND, "amount": "lots", "order": "B-1"}
    response = post(
        client_for("manager"),
        f"/api/v1/approvals/{request.pk}/decision",
        {"approve": True, "arguments": bad},
    )
    assert set(response.json()["fields"]["arguments"]) == {"amount", "order"}


def test_a_decided_request_is_409_with_its_current_state(client_for, members, pending):
    _, request = pending
    url = f"/api/v1/approvals/{request.pk}/decision"
    post(client_for("manager"), url, {"approve": False, "comment": "no"})
    response = post(client_for("admin"), url, {"approve": True})
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "approval_already_decided"
    assert body["detail"]["status"] == "rejected"
    assert body["detail"]["decided_by"] == members["manager"].user.username
    assert body["detail"]["comment"] == "no"


def test_a_request_the_policy_keeps_from_the_caller_is_403(client_for, members):
    add_policy(members["admin"], approver_role="admin")
    _, request = paused_refund(members["member"])
    response = post(
        client_for("manager"), f"/api/v1/approvals/{request.pk}/decision", {"approve": True}
    )
    assert response.status_code == 403
    assert response.json()["code"] == "not_an_approver"


def test_the_same_idempotency_key_replays_the_decision_instead_of_deciding_again(
    client_for, pending, enqueued, django_capture_on_commit_callbacks
):
    run, request = pending
    client = client_for("manager")
    url = f"/api/v1/approvals/{request.pk}/decision"
    with django_capture_on_commit_callbacks(execute=True):
        first = post(client, url, {"approve": True}, **{"Idempotency-Key": "chatops-42"})
        again = post(client, url, {"approve": True}, **{"Idempotency-Key": "chatops-42"})
    assert first.status_code == again.status_code == 200
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    assert len(enqueued) == 1
    other = post(client, url, {"approve": False}, **{"Idempotency-Key": "chatops-42"})
    assert other.status_code == 422
    fresh = post(client, url, {"approve": True}, **{"Idempotency-Key": "chatops-43"})
    assert fresh.status_code == 409


def test_the_schema_documents_the_approvals_endpoints(db, tmp_path):
    schema = Client().get("/api/schema/?format=json").json()
    for path in (
        "/api/v1/approvals",
        "/api/v1/approvals/{request_id}",
        "/api/v1/approvals/{request_id}/decision",
    ):
        assert path in schema["paths"]
    decide = schema["paths"]["/api/v1/approvals/{request_id}/decision"]["post"]
    assert "Idempotency-Key" in {p["name"] for p in decide["parameters"]}
    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "s.yml"))
