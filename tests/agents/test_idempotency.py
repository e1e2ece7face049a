"""Idempotency-Key on the agents API: Stripe's semantics, stored per tenant, expiring."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from agents.runtime import errors, services
from agents.runtime.models import Run
from agents.runtime.sweeps import expire_idempotency
from tenants.idempotency import fingerprint
from tenants.models import IdempotencyRecord
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.test_api import count, fetch, post, set_run, start_run

RUN = {"agent": "refund_desk", "input": {"customer": "c-1"}}


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


@pytest.fixture
def client(client_for):
    return client_for("member")


def record(tenant, key_value: str) -> IdempotencyRecord:
    with tenant_scope(tenant.pk):
        return IdempotencyRecord.objects.for_tenant(tenant).get(key=key_value)


def test_a_retry_replays_the_first_response_and_starts_no_second_run(client, tenant_a):
    first = post(client, "/api/v1/runs", RUN, **key("k-1"))
    again = post(client, "/api/v1/runs", RUN, **key("k-1"))
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert count(Run, tenant_a) == 1
    stored = record(tenant_a, "k-1")
    assert (stored.status, stored.response_status) == ("succeeded", 201)
    assert stored.expires_at > timezone.now() + dt.timedelta(hours=23)


def test_the_same_body_with_keys_in_another_order_is_the_same_request(client, tenant_a):
    post(client, "/api/v1/runs", {"agent": "refund_desk", "input": {"a": 1, "b": 2}}, **key("k"))
    again = client.post(
        "/api/v1/runs",
        '{"input": {"b": 2, "a": 1}, "agent": "refund_desk"}',
        content_type="application/json",
        headers=key("k"),
    )
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert count(Run, tenant_a) == 1


def test_without_a_key_every_post_acts(client, tenant_a):
    post(client, "/api/v1/runs", RUN)
    post(client, "/api/v1/runs", RUN)
    assert count(Run, tenant_a) == 2 and count(IdempotencyRecord, tenant_a) == 0


def test_the_same_key_with_a_different_body_is_a_422(client, tenant_a):
    post(client, "/api/v1/runs", RUN, **key("k-2"))
    other = post(client, "/api/v1/runs", {**RUN, "input": {"customer": "c-2"}}, **key("k-2"))
    assert other.status_code == 422
    assert other.json()["code"] == "idempotency_key_reused"
    assert count(Run, tenant_a) == 1


def test_the_same_key_on_another_endpoint_is_a_422(client, tenant_a):
    post(client, "/api/v1/runs", RUN, **key("k-3"))
    other = post(client, "/api/v1/sessions", {"agent": "refund_desk"}, **key("k-3"))
    assert other.status_code == 422
    assert count(Run, tenant_a) == 1


def test_another_user_reusing_a_key_gets_422_not_the_first_users_response(client_for, tenant_a):
    post(client_for("member"), "/api/v1/runs", RUN, **key("shared"))
    response = post(client_for("manager"), "/api/v1/runs", RUN, **key("shared"))
    assert response.status_code == 422
    assert "id" not in response.json()


def test_keys_are_per_tenant(client_for, tenant_a, tenant_b):
    assert post(client_for("member"), "/api/v1/runs", RUN, **key("k")).status_code == 201
    assert post(client_for("outsider"), "/api/v1/runs", RUN, **key("k")).status_code == 201
    assert count(Run, tenant_a) == 1 and count(Run, tenant_b) == 1


def test_an_api_key_may_use_idempotency_keys(tenant_a):
    api_key = factories.make_api_key(tenant_a, ["read", "write"])
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key.raw}")
    first = post(client, "/api/v1/runs", RUN, **key("k"))
    again = post(client, "/api/v1/runs", RUN, **key("k"))
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert count(Run, tenant_a) == 1


@pytest.mark.parametrize(
    "value", ["", "x" * 256, "tab\there", "bell\x07", "é-not-ascii"], ids=["empty", "256", "tab",
    "control", "non-ascii"]
)  # fmt: skip
def test_a_malformed_key_gets_400_and_nothing_is_written(client, tenant_a, value):
    response = client.post(
        "/api/v1/runs", RUN, content_type="application/json", HTTP_IDEMPOTENCY_KEY=value
    )
    assert response.status_code == 400
    assert response.json()["code"] == "idempotency_key_invalid"
    assert count(Run, tenant_a) == 0 and count(IdempotencyRecord, tenant_a) == 0


def test_a_key_of_255_printable_characters_is_accepted(client, tenant_a):
    assert post(client, "/api/v1/runs", RUN, **key("~ " + "k" * 253)).status_code == 201
    assert count(IdempotencyRecord, tenant_a) == 1


def test_a_request_that_fails_validation_stores_nothing_and_the_key_works_after(client, tenant_a):
    bad = post(client, "/api/v1/runs", {"agent": "refund_desk", "input": [1]}, **key("k-4"))
    assert bad.status_code == 400
    assert count(IdempotencyRecord, tenant_a) == 0
    unknown = post(client, "/api/v1/runs", {"agent": "nobody"}, **key("k-4"))
    assert unknown.status_code == 400 and unknown.json()["code"] == "unknown_agent"
    assert count(IdempotencyRecord, tenant_a) == 0
    good = post(client, "/api/v1/runs", RUN, **key("k-4"))
    assert good.status_code == 201 and "Idempotent-Replayed" not in good
    assert count(Run, tenant_a) == 1


def test_an_error_response_is_stored_and_replayed_with_its_status(client, members, tenant_a):
    run = set_run(start_run(members["member"]), status="succeeded")
    url = f"/api/v1/runs/{run.pk}/cancel"
    first = post(client, url, **key("cancel-1"))
    assert first.status_code == 409 and first.json()["code"] == "run_finished"
    set_run(run, status="queued")  # even if the run could be cancelled now ...
    again = post(client, url, **key("cancel-1"))
    assert again.status_code == 409 and again.json() == first.json()  # ... the answer stands
    assert again["Idempotent-Replayed"] == "true"
    assert fetch(Run, tenant_a, run.pk).status == "queued"
    assert record(tenant_a, "cancel-1").status == "failed"


def test_an_error_response_rolls_back_the_handlers_writes_but_keeps_its_record(
    client, tenant_a, monkeypatch
):
    def start_then_conflict(**kwargs):
        services_run_start(**kwargs)
        raise errors.SessionBusy()

    services_run_start = services.run_start
    monkeypatch.setattr(services, "run_start", start_then_conflict)
    first = post(client, "/api/v1/runs", RUN, **key("half"))
    assert first.status_code == 409 and first.json()["code"] == "session_busy"
    assert count(Run, tenant_a) == 0  # the run written before the error is gone
    stored = record(tenant_a, "half")
    assert (stored.status, stored.response_status) == ("failed", 409)
    assert stored.response_body == first.json()


def test_a_successful_decision_is_replayed_not_decided_twice(client_for, members, tenant_a):
    from tests.agents.test_api import waiting_for_approval

    run = waiting_for_approval(members["member"])
    manager = client_for("manager")
    url = f"/api/v1/runs/{run.pk}/decision"
    first = post(manager, url, {"approve": True}, **key("decide"))
    again = post(manager, url, {"approve": True}, **key("decide"))
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"


def test_a_key_still_in_flight_is_a_409(client, members, tenant_a):
    member = members["member"]
    principal = factories.principal_for(member)
    body_print = fingerprint(method="POST", path="/api/v1/runs", body=RUN, principal=principal)
    with tenant_scope(tenant_a.pk):
        IdempotencyRecord.objects.create(
            tenant=tenant_a,
            key="busy",
            fingerprint=body_print,
            status="started",
            expires_at=timezone.now() + dt.timedelta(hours=1),
        )
    response = post(client, "/api/v1/runs", RUN, **key("busy"))
    assert response.status_code == 409
    assert response.json()["code"] == "idempotency_key_in_flight"
    assert count(Run, tenant_a) == 0


def test_the_sweep_deletes_expired_keys_and_the_key_can_be_used_again(client, tenant_a):
    post(client, "/api/v1/runs", RUN, **key("old"))
    post(client, "/api/v1/runs", RUN, **key("fresh"))
    with tenant_scope(tenant_a.pk):
        IdempotencyRecord.objects.for_tenant(tenant_a).filter(key="old").update(
            expires_at=timezone.now() - dt.timedelta(seconds=1)
        )
    assert expire_idempotency() == 1
    assert count(IdempotencyRecord, tenant_a, key="old") == 0
    assert count(IdempotencyRecord, tenant_a, key="fresh") == 1
    reused = post(client, "/api/v1/runs", {**RUN, "input": {"customer": "c-9"}}, **key("old"))
    assert reused.status_code == 201 and "Idempotent-Replayed" not in reused
    assert count(Run, tenant_a) == 3


def test_an_expired_key_is_free_even_before_the_sweep_runs(client, tenant_a):
    post(client, "/api/v1/runs", RUN, **key("stale"))
    with tenant_scope(tenant_a.pk):
        IdempotencyRecord.objects.for_tenant(tenant_a).update(
            expires_at=timezone.now() - dt.timedelta(seconds=1)
        )
    again = post(client, "/api/v1/runs", RUN, **key("stale"))
    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert count(Run, tenant_a) == 2 and count(IdempotencyRecord, tenant_a) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_duplicate_sent_while_the_first_is_in_flight_waits_and_then_replays(
    members, tenant_a, enqueued, monkeypatch
):
    entered, release = threading.Event(), threading.Event()
    real_run_start = services.run_start

    def slow_run_start(**kwargs):
        run = real_run_start(**kwargs)
        entered.set()
        release.wait(20)
        return run

    monkeypatch.setattr(services, "run_start", slow_run_start)
    user = members["member"].user
    responses = {}

    def send(name: str) -> None:
        try:
            http = Client()
            http.force_login(user)
            responses[name] = post(http, "/api/v1/runs", RUN, **key("dup"))
        finally:
            connection.close()

    first = threading.Thread(target=send, args=("first",))
    first.start()
    assert entered.wait(20)
    second = threading.Thread(target=send, args=("second",))
    second.start()
    _wait_for_a_lock_waiter()  # the second INSERT waits on the first's uncommitted key
    release.set()
    first.join(20)
    second.join(20)
    assert responses["first"].status_code == responses["second"].status_code == 201
    assert responses["second"].json() == responses["first"].json()
    assert responses["second"]["Idempotent-Replayed"] == "true"
    assert count(Run, tenant_a) == 1
    assert len(enqueued) == 1


def _wait_for_a_lock_waiter() -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.02)
    raise AssertionError("the duplicate request never waited for the first one")
