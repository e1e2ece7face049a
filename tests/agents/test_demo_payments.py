"""The demo payment provider: mounted only with the demo on, answering only the demo agent
(a shared secret derived from SECRET_KEY), and listing nobody's refunds."""

from __future__ import annotations

import importlib
import json
import uuid

import pytest
from django.db import connection
from django.test import Client
from django.urls import clear_url_caches

from agents.demo import payments as demo_payments
from tests import factories, processes
from tests.demo_refunds import refund_count

pytestmark = pytest.mark.django_db
URL = "/demo/payments/refunds"


def _remount() -> None:
    """Import the URLconf again: it mounts the provider only if settings.DEMO is on."""
    import config.urls

    importlib.reload(config.urls)
    clear_url_caches()


def _demo(settings, on: bool):
    was = settings.DEMO
    settings.DEMO = on
    _remount()
    yield
    settings.DEMO = was
    _remount()


@pytest.fixture
def demo_on(settings):
    yield from _demo(settings, True)


@pytest.fixture
def demo_off(settings):
    yield from _demo(settings, False)


def refund(client: Client, key: str, *, secret: str | None, customer: str = "ada@example.com"):
    headers = {"HTTP_IDEMPOTENCY_KEY": key}
    if secret is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    body = json.dumps({"customer": customer, "order": "A-1001", "amount_cents": 40000})
    return client.post(URL, body, content_type="application/json", **headers)


def test_the_provider_is_not_mounted_when_the_demo_is_off(demo_off):
    secret = demo_payments.shared_secret()
    assert refund(Client(), "k-off", secret=secret).status_code == 404
    assert Client().get(URL, HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 404
    assert refund_count() == 0


@pytest.mark.parametrize(
    "authorization", [None, "Bearer ", "Bearer wrong", "Basic abc", "bearer-but-no-space"]
)
def test_without_the_shared_secret_it_answers_401_and_refunds_nothing(demo_on, authorization):
    headers = {} if authorization is None else {"HTTP_AUTHORIZATION": authorization}
    body = json.dumps({"customer": "ada@example.com", "amount_cents": 100})
    response = Client().post(
        URL, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k", **headers
    )
    assert response.status_code == 401 and response.json()["code"] == "unauthenticated"
    assert refund_count() == 0


def test_a_logged_in_admin_is_not_the_demo_agent(demo_on, tenant_a):
    browser = Client()
    browser.force_login(factories.make_member(tenant_a, "admin").user)
    assert refund(browser, "k-admin", secret=None).status_code == 401
    assert browser.get(URL).status_code == 401


def test_with_the_secret_it_refunds_once_per_idempotency_key(demo_on):
    secret = demo_payments.shared_secret()
    first = refund(Client(), "k-1", secret=secret)
    again = refund(Client(), "k-1", secret=secret)
    assert first.status_code == again.status_code == 200
    assert first.json()["refund_id"] == again.json()["refund_id"]
    assert (first.json()["replayed"], again.json()["replayed"]) == (False, True)
    assert refund_count() == 1


def test_it_lists_no_refunds_to_anyone(demo_on):
    secret = demo_payments.shared_secret()
    refund(Client(), "k-other-tenant", secret=secret, customer="bob@globex.example")
    for authorization in ({}, {"HTTP_AUTHORIZATION": f"Bearer {secret}"}):
        response = Client().get(URL, **authorization)
        assert response.status_code in (401, 405)
        assert "globex" not in response.content.decode()


def test_the_secret_is_derived_from_the_secret_key_unless_set(settings):
    settings.DEMO_PAYMENTS_SECRET = ""
    settings.SECRET_KEY = "one-" + "x" * 46
    derived = demo_payments.shared_secret()
    assert len(derived) >= 32 and settings.SECRET_KEY not in derived
    settings.SECRET_KEY = "two-" + "x" * 46
    assert demo_payments.shared_secret() != derived
    settings.DEMO_PAYMENTS_SECRET = "configured"
    assert demo_payments.shared_secret() == "configured"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the provider runs in the server process
def test_the_demo_agents_refund_tool_is_let_in_by_the_live_server(console_url, settings):
    from agents.demo.refund_desk import issue_refund

    # The server derives its secret from the key every child process of the tests gets.
    settings.SECRET_KEY = processes.CHILD_SECRET_KEY
    settings.DEMO_PAYMENTS_URL = console_url + URL
    key = f"tool-{uuid.uuid4()}"
    receipt = issue_refund(
        customer="ada@example.com", order="A-1001", amount="1.00", idempotency_key=key
    )
    assert receipt["refund_id"].startswith("re_") and receipt["replayed"] is False
    assert refund_count(key) == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT requests FROM agents_demorefund WHERE idempotency_key = %s", [key])
        assert cursor.fetchone() == (1,)


@pytest.mark.parametrize(
    "body",
    [
        b'{"customer": "a\\u0000b", "amount_cents": 100}',
        b"[" * 100_000,
        b'{"customer": "c", "amount_cents": 99999999999999}',
        b'{"customer": "' + b"x" * 101 + b'", "amount_cents": 100}',
    ],
)
def test_the_demo_provider_refuses_bad_bodies_with_400_whatever_the_content_type(body, demo_on):
    response = Client().post(
        URL,
        body,
        content_type="text/plain",
        HTTP_IDEMPOTENCY_KEY="k-1",
        HTTP_AUTHORIZATION=demo_payments.auth_header()["Authorization"],
    )
    assert response.status_code == 400
    assert refund_count() == 0
