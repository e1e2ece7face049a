"""A database outage, an exhausted pool or a broker outage answers 503 with Retry-After in the
standard error format (API) or a plain page (browser), never a traceback; and a web process
holds a bounded number of PostgreSQL connections however many requests it serves."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import kombu.exceptions
import pytest
from django.db import OperationalError, connection, transaction
from django.http import JsonResponse
from django.test import RequestFactory

from tenants.middleware import TenantMiddleware
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests import factories, processes


def _get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urlopen(Request(url, headers=headers), timeout=30) as response:
            return response.status, _lower(response.headers), response.read()
    except HTTPError as error:
        return error.code, _lower(error.headers), error.read()


def _lower(headers) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def test_a_view_that_loses_the_database_answers_503_and_writes_nothing(tenant_a):
    member = factories.make_member(tenant_a, "admin")

    def view(request):
        AuditEvent.objects.create(tenant=tenant_a, actor_label="x", action="half.written")
        raise OperationalError("server closed the connection unexpectedly")

    middleware = TenantMiddleware(view)

    def call(path: str):
        request = RequestFactory().get(path)
        request.user = member.user
        request.session = {}
        try:
            return middleware(request)
        except OperationalError as exc:  # Django hands view errors to process_exception
            return middleware.process_exception(request, exc)

    api = call("/api/v1/runs")
    assert api.status_code == 503 and api["Retry-After"]
    assert json.loads(api.content)["code"] == "unavailable"
    page = call("/runs/")
    assert page.status_code == 503 and b"Briefly unavailable" in page.content
    assert b"Traceback" not in page.content
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM tenants_auditevent WHERE action = 'half.written'")
        assert cursor.fetchone()[0] == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_with_the_database_unreachable_the_web_process_answers_503_not_a_traceback():
    dead = f"postgres://agentstate:nope@127.0.0.1:{processes.free_port()}/agentstate"
    proc, url = processes.start_asgi(
        "asgi-no-db", DATABASE_URL=dead, DB_POOL_TIMEOUT_SECONDS="0.5", wait_path="/healthz"
    )
    try:
        status, headers, body = _get(url + "/api/v1/me", Authorization="Bearer ak_0_x")
        assert status == 401 or status == 503, body  # a malformed key needs no database
        tenant_hex = "0" * 32
        status, headers, body = _get(
            url + "/api/v1/me", Authorization=f"Bearer ak_{tenant_hex}_{'x' * 43}"
        )
        assert status == 503, body
        assert headers["retry-after"] == "5"
        assert json.loads(body)["code"] == "unavailable"
        status, headers, body = _get(url + "/runs/", Cookie="sessionid=abc")
        assert status == 503 and b"Briefly unavailable" in body and b"Traceback" not in body
    finally:
        proc.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_web_process_holds_at_most_its_pool_of_connections_under_concurrent_requests():
    tenant = factories.make_tenant("pool-test")
    key = factories.make_api_key(tenant, ["read"])
    name = f"pool-test-{processes.free_port()}"
    proc, url = processes.start_asgi(
        "asgi-pool", DB_POOL_MAX_SIZE="3", DB_POOL_MIN_SIZE="1", DB_APPLICATION_NAME=name
    )
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        with connection.cursor() as cursor:
            while not stop.wait(0.05):
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name]
                )
                peak = max(peak, cursor.fetchone()[0])

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(12) as pool:
            statuses = list(
                pool.map(
                    lambda _: _get(url + "/api/v1/runs", Authorization=f"Bearer {key.raw}")[0],
                    range(240),
                )
            )
    finally:
        stop.set()
        sampler.join()
        proc.stop()
    assert set(statuses) == {200}
    assert 1 <= peak <= 3


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_during_a_postgresql_restart_the_web_answers_503_never_500_and_then_recovers():
    from config import embedded

    tenant = factories.make_tenant("restart-test")
    key = factories.make_api_key(tenant, ["read"])
    proc, url = processes.start_asgi("asgi-restart", DB_POOL_TIMEOUT_SECONDS="1")
    statuses: list[int] = []
    refusals: list[str] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            status, _, body = _get(url + "/api/v1/runs", Authorization=f"Bearer {key.raw}")
            statuses.append(status)
            if status >= 500:
                refusals.append(json.loads(body)["code"])

    client = threading.Thread(target=hammer)
    client.start()
    try:
        time.sleep(0.5)
        connection.close()
        assert embedded.stop_postgres()
        try:
            time.sleep(2)
        finally:
            embedded.ensure_postgres()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and statuses[-1:] != [200]:
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        stop.set()
        client.join()
        proc.stop()
    assert 500 not in statuses
    assert 503 in statuses, sorted(set(statuses))
    assert set(refusals) == {"unavailable"}
    assert statuses[-1] == 200


@pytest.mark.django_db(transaction=True)
def test_a_request_whose_queue_message_fails_after_its_commit_keeps_its_own_answer(tenant_a):
    # Redis away: the write committed, then the hook sending its queue message failed. The work
    # is durable (the recovery sweep sends the message later); a 503 would have the client do
    # it again.
    member = factories.make_member(tenant_a, "admin")

    def send_to_queue() -> None:
        raise kombu.exceptions.OperationalError("Error 111 connecting to 127.0.0.1:6379.")

    def view(request):
        AuditEvent.objects.create(tenant=tenant_a, actor_label="x", action="committed.first")
        transaction.on_commit(send_to_queue)
        return JsonResponse({"ok": True}, status=201)

    request = RequestFactory().post("/api/v1/runs")
    request.user = member.user
    request.session = {}
    response = TenantMiddleware(view)(request)
    assert response.status_code == 201
    with tenant_scope(tenant_a.pk):
        assert AuditEvent.objects.filter(action="committed.first").count() == 1
