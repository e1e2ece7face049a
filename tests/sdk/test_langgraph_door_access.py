"""Who may read and write LangGraph threads through `/api/v1/langgraph/*`, and how an
interrupt's approval is judged and answered. A thread is driven by the API key (or person)
that saved its first checkpoint: nobody else writes it, members touch none, and a policy
judges the amount in the arguments, never a number the graph declares beside them."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from agents.runtime.models import AgentSession, ExternalCheckpoint, ExternalWrite, Run
from approvals.models import ApprovalPolicy, ApprovalRequest
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests import factories

pytestmark = pytest.mark.django_db

BASE = "/api/v1/langgraph"
WHO = ["admin", "manager", "member", "viewer", "outsider"]


def key_client(tenant, scopes=("read", "write")) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {factories.make_api_key(tenant, list(scopes)).raw}")


def put_checkpoint(client: Client, thread: str, checkpoint_id: str = "1", **extra: Any):
    body = {
        "thread_id": thread,
        "checkpoint_id": checkpoint_id,
        "type": "json",
        "blob": base64.b64encode(b"{}").decode(),
        **extra,
    }
    return client.post(f"{BASE}/checkpoints", body, content_type="application/json")


def put_interrupt(client: Client, thread: str, value: Any, *, interrupt_id: str = "i-1"):
    body = {
        "thread_id": thread,
        "checkpoint_id": "1",
        "task_id": "task-1",
        "writes": [{"idx": -3, "channel": "__interrupt__", "type": "json", "blob": ""}],
        "interrupts": [{"id": interrupt_id, "value": value}],
    }
    return client.post(f"{BASE}/writes", body, content_type="application/json")


def decision(client: Client, thread: str, interrupt_id: str = "i-1"):
    return client.get(f"{BASE}/decision", {"thread_id": thread, "interrupt_id": interrupt_id})


@pytest.fixture
def driver(tenant_a) -> Client:
    """The key whose graph keeps thread "t-1" (one checkpoint saved)."""
    client = key_client(tenant_a)
    assert put_checkpoint(client, "t-1").status_code == 201
    return client


def checkpoints_of(tenant, thread: str = "t-1") -> int:
    with tenant_scope(tenant.pk):
        return ExternalCheckpoint.objects.filter(thread_id=thread).count()


# --- members own no thread ------------------------------------------------------------------------


def test_a_members_session_sees_no_thread_and_cannot_write_or_delete_one(
    driver, client_for, tenant_a
):
    member = client_for("member")

    listed = member.get(f"{BASE}/checkpoints")
    one = member.get(f"{BASE}/checkpoints", {"thread_id": "t-1"})
    saved = put_checkpoint(member, "t-1", "2")
    own = put_checkpoint(member, "members-own")
    interrupt = put_interrupt(member, "t-1", {"action": "refund", "arguments": {}})
    deleted = member.delete(f"{BASE}/threads/t-1")
    asked = decision(member, "t-1")

    assert listed.status_code == one.status_code == 200
    assert listed.json()["results"] == one.json()["results"] == []
    for refused in (saved, own, interrupt, deleted):
        assert refused.status_code == 403, refused.content
        assert refused.json()["code"] == "permission_denied"
    assert asked.status_code == 404
    assert checkpoints_of(tenant_a) == 1 and checkpoints_of(tenant_a, "members-own") == 0
    with tenant_scope(tenant_a.pk):
        assert not ApprovalRequest.objects.exists()


@pytest.mark.parametrize("who", WHO)
def test_each_role_reads_the_tenants_threads_except_members_and_outsiders(driver, client_for, who):
    found = client_for(who).get(f"{BASE}/checkpoints", {"thread_id": "t-1"}).json()["results"]
    assert len(found) == (0 if who in ("member", "outsider") else 1)


@pytest.mark.parametrize("who", ["admin", "manager", "viewer"])
def test_staff_cannot_write_a_thread_a_key_drives(driver, client_for, tenant_a, who):
    client = client_for(who)
    assert put_checkpoint(client, "t-1", "2").status_code == (403 if who == "viewer" else 404)
    assert put_interrupt(client, "t-1", {"action": "refund"}).status_code in (403, 404)
    assert checkpoints_of(tenant_a) == 1


def test_a_manager_keeps_a_thread_of_their_own(client_for, tenant_a):
    manager = client_for("manager")
    assert put_checkpoint(manager, "mine").status_code == 201
    assert put_checkpoint(manager, "mine", "2").status_code == 201
    assert put_checkpoint(client_for("admin"), "mine", "3").status_code == 404
    assert checkpoints_of(tenant_a, "mine") == 2


# --- keys: the driver, and the others -------------------------------------------------------------


def test_another_key_of_the_tenant_cannot_write_the_thread_and_the_attempt_is_audited(
    driver, tenant_a
):
    other = key_client(tenant_a)

    saved = put_checkpoint(other, "t-1", "2")
    interrupt = put_interrupt(other, "t-1", {"action": "refund", "arguments": {"amount": 1}})
    deleted = other.delete(f"{BASE}/threads/t-1")

    for refused in (saved, interrupt, deleted):
        assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    assert checkpoints_of(tenant_a) == 1
    with tenant_scope(tenant_a.pk):
        assert not ApprovalRequest.objects.exists()
        assert not ExternalWrite.objects.exists()
        assert Run.objects.get(session__title="t-1").status == "succeeded"
        refusals = AuditEvent.objects.filter(action="langgraph.write_refused")
        assert sorted(e.after["verb"] for e in refusals) == ["checkpoint", "delete", "writes"]
        assert {e.target_id for e in refusals} == {"t-1"}


def test_the_driver_writes_on_and_a_read_key_reads_but_cannot_write(driver, tenant_a):
    reader = key_client(tenant_a, ["read"])

    assert put_checkpoint(driver, "t-1", "2").status_code == 201
    assert len(reader.get(f"{BASE}/checkpoints", {"thread_id": "t-1"}).json()["results"]) == 2
    assert put_checkpoint(reader, "t-1", "3").status_code == 403
    assert reader.delete(f"{BASE}/threads/t-1").status_code == 403
    assert checkpoints_of(tenant_a) == 2


def test_an_admin_may_delete_a_thread_another_key_drives_but_a_manager_may_not(
    driver, client_for, tenant_a
):
    assert client_for("manager").delete(f"{BASE}/threads/t-1").status_code == 404
    assert checkpoints_of(tenant_a) == 1
    assert client_for("admin").delete(f"{BASE}/threads/t-1").status_code == 204
    assert checkpoints_of(tenant_a) == 0


def test_the_outsider_neither_sees_nor_deletes_the_thread(driver, client_for, tenant_a):
    outsider = client_for("outsider")
    assert outsider.get(f"{BASE}/checkpoints").json()["results"] == []
    assert outsider.delete(f"{BASE}/threads/t-1").status_code == 204  # nothing of theirs
    assert decision(outsider, "t-1").status_code == 404
    assert checkpoints_of(tenant_a) == 1


def test_a_thread_kept_before_drivers_existed_is_adopted_by_its_next_writer(driver, tenant_a):
    with tenant_scope(tenant_a.pk):
        AgentSession.objects.filter(title="t-1").update(driver="")
    adopter = key_client(tenant_a)
    assert put_checkpoint(adopter, "t-1", "2").status_code == 201
    assert put_checkpoint(driver, "t-1", "3").status_code == 404


# --- amounts are read from the arguments -------------------------------------------------------


@pytest.fixture
def threshold_100(tenant_a):
    with tenant_scope(tenant_a.pk):
        return ApprovalPolicy.objects.create(
            tenant=tenant_a, action="refund", amount_threshold=Decimal("100")
        )


def only_request(tenant) -> ApprovalRequest:
    with tenant_scope(tenant.pk):
        [request] = ApprovalRequest.objects.all()
        return request


@pytest.mark.parametrize("declared", [0, -5, 50, None])
def test_a_policy_judges_the_amount_in_the_arguments_not_the_one_declared(
    driver, tenant_a, threshold_100, declared
):
    value = {"action": "refund", "arguments": {"order": "A-1", "amount": "9999"}}
    if declared is not None:
        value["amount"] = declared
    response = put_interrupt(driver, "t-1", value)

    if declared is None:
        assert response.status_code == 204
        request = only_request(tenant_a)
        assert request.status == "pending" and request.amount == Decimal("9999.00")
    else:
        assert response.status_code == 400
        assert response.json()["code"] == ("invalid_amount" if declared <= 0 else "amount_mismatch")
        with tenant_scope(tenant_a.pk):
            assert not ApprovalRequest.objects.exists() and not ExternalWrite.objects.exists()


def test_an_amount_only_declared_beside_the_arguments_waits_for_a_person(
    driver, tenant_a, threshold_100
):
    value = {"action": "refund", "arguments": {"order": "A-1"}, "amount": 5}
    assert put_interrupt(driver, "t-1", value).status_code == 204
    request = only_request(tenant_a)
    assert request.status == "pending" and request.amount is None


def test_an_amount_in_the_arguments_under_the_threshold_is_approved_by_the_policy(
    driver, tenant_a, threshold_100
):
    value = {"action": "refund", "arguments": {"amount": 40}, "amount": "40.00"}
    assert put_interrupt(driver, "t-1", value).status_code == 204
    assert only_request(tenant_a).status == "approved"


@pytest.mark.parametrize(
    "amount",
    [True, False, 0, -5, "-0.001", 1e13, 1e300, "1e300", "NaN", "Infinity", "abc", [], {}, "0.001"],
    ids=repr,
)
@pytest.mark.parametrize("where", ["declared", "arguments"])
def test_an_amount_that_is_not_a_positive_sum_is_refused_with_a_stable_code(
    driver, tenant_a, threshold_100, amount, where
):
    value: dict[str, Any] = {"action": "refund", "arguments": {"order": "A-1"}}
    if where == "declared":
        value["amount"] = amount
    else:
        value["arguments"]["amount"] = amount

    response = put_interrupt(driver, "t-1", value)

    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_amount"
    with tenant_scope(tenant_a.pk):
        assert not ApprovalRequest.objects.exists()


def test_a_huge_amount_sent_as_raw_json_is_refused_not_a_server_error(driver):
    body = json.dumps(
        {
            "thread_id": "t-1",
            "checkpoint_id": "1",
            "task_id": "x",
            "writes": [],
            "interrupts": [{"id": "i", "value": {"action": "refund", "amount": 1e308}}],
        }
    ).replace("1e+308", "1" + "0" * 400)
    response = driver.post(f"{BASE}/writes", body, content_type="application/json")
    assert response.status_code == 400


# --- a decision is bound to its interrupt ---------------------------------------------------------


def test_the_decision_answered_is_that_of_the_interrupt_asked_about(driver, tenant_a, members):
    from approvals.services import approval_decide

    assert put_interrupt(driver, "t-1", {"action": "refund"}, interrupt_id="first").status_code
    request = only_request(tenant_a)
    with tenant_scope(tenant_a.pk):
        approval_decide(
            principal=factories.principal_for(members["manager"]),
            request=request,
            approve=True,
            comment="ok",
        )

    mine = decision(driver, "t-1", "first").json()
    other = decision(driver, "t-1", "second").json()

    assert mine["decision"]["approved"] is True and mine["request_id"] == str(request.pk)
    assert other["decision"] is None and other["waiting"] is False
    assert other["request_id"] != mine["request_id"]


def test_the_decision_endpoint_needs_the_interrupt_id(driver):
    response = driver.get(f"{BASE}/decision", {"thread_id": "t-1"})
    assert response.status_code == 400 and "interrupt_id" in response.json()["fields"]


# --- the one-request-per-step door (POST /langgraph/steps) holds the same rules ------------------


def steps(client: Client, ops: list[dict[str, Any]]):
    return client.post(f"{BASE}/steps", json.dumps({"ops": ops}), content_type="application/json")


def step_put(thread: str, checkpoint_id: str) -> dict[str, Any]:
    return {
        "op": "put",
        "thread_id": thread,
        "checkpoint_id": checkpoint_id,
        "type": "json",
        "blob": base64.b64encode(b"{}").decode(),
    }


def test_another_key_cannot_write_the_thread_through_the_steps_door_and_it_is_audited(
    driver, tenant_a
):
    other = key_client(tenant_a)
    interrupt = {
        "op": "writes",
        "thread_id": "t-1",
        "checkpoint_id": "1",
        "task_id": "x",
        "writes": [{"idx": -3, "channel": "__interrupt__", "type": "json", "blob": ""}],
        "interrupts": [{"id": "i", "value": {"action": "refund", "arguments": {"amount": 1}}}],
    }

    refused = steps(other, [step_put("t-1", "2"), interrupt])
    own = steps(other, [step_put("others-own", "1")])

    assert refused.status_code == 404 and refused.json()["code"] == "not_found"
    assert own.status_code == 200
    assert checkpoints_of(tenant_a) == 1
    with tenant_scope(tenant_a.pk):
        assert not ApprovalRequest.objects.exists() and not ExternalWrite.objects.exists()
        [audit] = AuditEvent.objects.filter(action="langgraph.write_refused")
        assert audit.target_id == "t-1" and audit.after["verb"] == "steps"


def test_the_steps_door_judges_an_interrupts_amount_like_the_writes_endpoint(
    driver, tenant_a, threshold_100
):
    forged = {
        "op": "writes",
        "thread_id": "t-1",
        "checkpoint_id": "1",
        "task_id": "x",
        "writes": [{"idx": -3, "channel": "__interrupt__", "type": "json", "blob": ""}],
        "interrupts": [
            {"id": "i", "value": {"action": "refund", "amount": 0, "arguments": {"amount": 9999}}}
        ],
    }
    response = steps(driver, [forged])
    assert response.status_code == 400 and response.json()["code"] == "invalid_amount"
    with tenant_scope(tenant_a.pk):
        assert not ApprovalRequest.objects.exists()


@pytest.mark.parametrize("who", ["admin", "member"])
def test_a_signed_in_person_cannot_use_the_steps_door(client_for, who):
    assert steps(client_for(who), [step_put("mine", "1")]).status_code == 401
