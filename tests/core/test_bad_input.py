"""No 500 from input: every URL of the resolver is sent NUL characters, lone surrogates,
deep JSON and bytes that are not UTF-8; each answers 4xx and nothing is written.
The websocket answers such messages like any malformed one, and stays open."""

from __future__ import annotations

import logging
import re
import time
import uuid

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RoutePattern

from agents.runtime.models import AgentSession, Message, Run, RunEvent
from approvals.models import ApprovalRequest
from memory.models import MemoryFact
from tenants.models import ApiKey, AuditEvent, Membership, Role
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.test_api import open_session, waiting_for_approval, waiting_for_event
from tests.live.conftest import Socket, run_async, session_cookie
from tests.memory.conftest import remember

ADMIN = "django-admin/"
ALL_SCOPES = ["read", "write", "approve", "admin"]
WRITE_METHODS = ["post", "put", "patch", "delete"]
NUL_VALUE = '{"value": "a\\u0000b", "content": "x", "name": "\\u0000"}'
NUL_KEY = '{"a\\u0000b": 1}'
SURROGATE = '{"value": "\\ud800"}'
DEEP_40 = '{"value": ' + "[" * 40 + "]" * 40 + "}"
BRACKETS = "[" * 100_000


def routes(prefix: str = "") -> list[tuple[str, URLPattern]]:
    """Every path pattern of the resolver (regex patterns such as the admin's are skipped)."""

    def walk(patterns, base):
        for pattern in patterns:
            route = base + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                if isinstance(pattern.pattern, RoutePattern):
                    yield from walk(pattern.url_patterns, route)
            elif isinstance(pattern.pattern, RoutePattern):
                yield route, pattern

    found = walk(get_resolver().url_patterns, "")
    # The Django admin's ~200 URLs are Django's own forms behind the same middleware.
    return [(r, p) for r, p in found if r.startswith(prefix) and not r.startswith(ADMIN)]


def view_methods(pattern: URLPattern) -> set[str]:
    view = getattr(pattern.callback, "cls", None) or getattr(pattern.callback, "view_class", None)
    if view is None:
        return {"get", "post"}
    return {m for m in view.http_method_names if hasattr(view, m)}


API_WRITES = [
    (route, method)
    for route, pattern in routes("api/v1/")
    for method in sorted(view_methods(pattern) & set(WRITE_METHODS))
]
# /healthz, /readyz and /metrics answer in config.ops.OpsMiddleware and read no input (and
# /readyz is a 503 by design while no worker runs).
OPS = {"healthz", "readyz", "metrics"}
GET_ROUTES = [r for r, p in routes() if "get" in view_methods(p) and r not in OPS]


@pytest.fixture
def world(tenant_a, members):
    """One real object of each kind the URLs name, owned by the tenant's member."""
    member = members[Role.MEMBER]
    session = open_session(member)
    approval_run = waiting_for_approval(member, session=session)
    with tenant_scope(tenant_a.pk):
        approval = ApprovalRequest.objects.for_tenant(tenant_a).get(run=approval_run)
    other_key = factories.make_api_key(tenant_a, ["read"])
    ids = {
        "session_id": session.pk,
        "run_id": approval_run.pk,
        "event_run_id": waiting_for_event(member, session=session).pk,
        "request_id": approval.pk,
        "approval_id": approval.pk,
        "fact_id": remember(member, "Prefers email").pk,
        "key_id": other_key.key.pk,
        "subject_id": member.user_id,
        "membership_id": members[Role.VIEWER].pk,
        "policy_id": 1,
        "group_id": 1,
        "action": "retry",
        "token": "x",
    }
    return ids


def fill(route: str, ids: dict) -> str:
    def value(match: re.Match) -> str:
        name = match.group(2)
        if name == "run_id" and route.endswith("/events"):
            name = "event_run_id"
        return str(ids.get(name, uuid.uuid4() if match.group(1) == "uuid" else 1))

    return "/" + re.sub(r"<(?:(\w+):)?(\w+)>", value, route)


def snapshot(tenant) -> dict:
    """What a refused request must leave as it was."""
    with tenant_scope(tenant.pk):
        rows = {
            model.__name__: model.objects.for_tenant(tenant).count()
            for model in (AgentSession, Run, RunEvent, Message, ApprovalRequest, AuditEvent)
        }
        rows["runs"] = sorted(Run.objects.for_tenant(tenant).values_list("pk", "status", "version"))
        rows["approvals"] = sorted(
            ApprovalRequest.objects.for_tenant(tenant).values_list("pk", "status")
        )
        rows["keys"] = sorted(ApiKey.objects.for_tenant(tenant).values_list("pk", "revoked_at"))
        rows["roles"] = sorted(Membership.objects.for_tenant(tenant).values_list("pk", "role"))
        rows["facts"] = sorted(
            MemoryFact.objects.for_tenant(tenant).values_list("pk", "text", "valid_until")
        )
    return rows


@pytest.fixture
def api_client(tenant_a):
    key = factories.make_api_key(tenant_a, ALL_SCOPES)
    return Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")


def test_the_resolver_offers_json_endpoints_to_try():
    assert len(API_WRITES) >= 15  # the walk found the API, not an empty list


BAD_BODIES = [
    (NUL_VALUE, "invalid_characters", ["value"]),
    (NUL_KEY, "invalid_characters", ["a\\u0000b"]),
    (SURROGATE, "invalid_characters", ["value"]),
    (DEEP_40, "too_deep", None),
    (BRACKETS, "too_deep", None),
    (b'{"value": "\xff"}', "malformed_request", None),
]


@pytest.mark.parametrize("route, method", API_WRITES, ids=[f"{m} {r}" for r, m in API_WRITES])
def test_every_json_endpoint_refuses_bad_json_with_400_and_writes_nothing(
    tenant_a, world, api_client, route, method
):
    url = fill(route, world)
    before = snapshot(tenant_a)
    for body, code, fields in BAD_BODIES:
        started = time.monotonic()
        response = getattr(api_client, method)(url, body, content_type="application/json")
        assert time.monotonic() - started < 2
        assert response.status_code == 400, (url, body[:40], response.content[:300])
        answer = response.json()
        assert answer["code"] == code, (url, body[:40], answer)
        assert set(answer) <= {"code", "message", "fields"}
        if fields is not None:
            assert list(answer["fields"]) == fields
    assert snapshot(tenant_a) == before


def test_a_nul_inside_a_run_input_names_the_field(tenant_a, api_client):
    response = api_client.post(
        "/api/v1/runs",
        '{"agent": "refund_desk", "input": {"m": "a\\u0000b"}}',
        content_type="application/json",
    )
    assert response.status_code == 400
    fields = response.json()["fields"]
    assert list(fields) == ["input.m"] and "NUL" in fields["input.m"][0]


def test_the_api_takes_json_only(tenant_a, api_client):
    response = api_client.post("/api/v1/runs", {"agent": "refund_desk"})  # multipart
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


ODD_QUERY = {
    "before": "\u00b2",  # a digit to str.isdigit(), not to int()
    "after": "9" * 30,
    "limit": "9" * 30,
    "status": "\u00b2",
    "subject": "9" * 30,
    "target_id": "9" * 30,
    "target_type": "x" * 300,
    "q": "x" * 3000,
    "shown": "9" * 5000,
}


@pytest.mark.parametrize("route", GET_ROUTES)
def test_query_strings_of_every_page_and_endpoint_never_give_a_500(
    tenant_a, members, world, api_client, route
):
    url = fill(route, world)
    browser = Client()
    browser.force_login(members[Role.ADMIN].user)
    client = api_client if route.startswith("api/") else browser
    for query in ("q=a%00b", "a%00b=1", "before=%00", "q=%ED%A0%80", "q=%FF"):
        response = client.get(f"{url}?{query}")
        assert response.status_code == 400, (url, query, response.status_code)
        if route.startswith("api/"):
            assert response.json()["code"] == "invalid_characters"
        else:
            assert b"Bad request" in response.content
    for name, value in ODD_QUERY.items():  # odd but valid: each view's own answer, < 500
        response = client.get(url, {name: value})
        assert response.status_code < 500, (url, name, response.status_code)


def test_a_nul_in_the_path_is_a_400(db):
    assert Client().get("/memory/link/a%00b/").status_code == 400
    assert Client().get(f"/{ADMIN}login/?next=%00").status_code == 400
    assert Client().get("/api/v1/runs/%00").json()["code"] == "invalid_characters"


def test_a_nul_in_a_browser_form_is_a_400_page_naming_the_field(tenant_a, members, world):
    browser = Client()
    browser.force_login(members[Role.MANAGER].user)
    before = snapshot(tenant_a)
    response = browser.post(
        f"/approvals/{world['request_id']}/decide/",
        {"decision": "reject", "comment": "no\x00pe"},
    )
    assert response.status_code == 400
    assert b"Bad request" in response.content and b"comment" in response.content
    assert snapshot(tenant_a) == before


@pytest.mark.parametrize("body", [b"decision=reject&comment=%FF%FE", b"decision=reject&c%00=1"])
def test_an_urlencoded_form_with_bad_characters_is_a_400(tenant_a, members, world, body):
    browser = Client()
    browser.force_login(members[Role.MANAGER].user)
    response = browser.post(
        f"/approvals/{world['request_id']}/decide/",
        body,
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 400


def test_the_login_form_refuses_a_nul_before_looking_anyone_up(db):
    response = Client().post("/login/", {"username": "a\x00", "password": "x"})
    assert response.status_code == 400
    assert b"username" in response.content


# --- the live websocket ---------------------------------------------------------------------------

BAD_MESSAGES = [
    '{"type": "subscribe", "kind": "approvals", "filter": "status=\\u0000"}',
    '{"type": "subscribe", "kind": "run\\u0000"}',
    '{"type": "subscribe\\ud800", "kind": "runs"}',
    '{"type": "subscribe", "kind": "runs", "filter": "status=%00"}',
    '{"type": "subscribe", "kind": "runs", "x": ' + "[" * 40 + "]" * 40 + "}",
    "[" * 4000,
]


class Records(logging.Handler):
    """The consumer's log records. Not caplog: the first import of config.asgi configures
    logging again, which drops caplog's handler from the root logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def consumer_log():
    logger = logging.getLogger("agents.live.consumers")
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.mark.django_db(transaction=True)
def test_bad_websocket_messages_are_answered_as_malformed_and_the_socket_lives(
    tenant_a, members, consumer_log
):
    cookie = session_cookie(members[Role.MANAGER].user)

    async def scenario():
        async with Socket(cookie) as ws:
            for text in BAD_MESSAGES:
                await ws.send(text)
            assert await ws.nothing()
            await ws.subscribe("approvals")
            assert "approvals-badge" in await ws.receive()

    run_async(scenario)
    ignored = [r for r in consumer_log.records if "malformed" in r.getMessage()]
    assert len(ignored) == len(BAD_MESSAGES)


ODD_FORM = {
    "version": "9" * 30,
    "seq": "9" * 30,
    "at_seq": "\u00b2",
    "runs": ["x:\u00b2", f"{uuid.uuid4()}:{'9' * 30}"],
    "action": "retry",
    "role": "admin",
    "decision": "approve",
    "edit": "1",
    "comment": "x" * 5000,
    "note": "x" * 5000,
    "text": "x" * 100_000,
    "amount_threshold": "1e999",
    "expires_after_minutes": "9" * 30,
    "name": "x" * 1000,
    "users": "9" * 30,
    "tenant": "9" * 30,
    "arguments_json": '{"amount": 1e999}',
    "arg-amount": "1e999",
    "state": '{"a": 1e999}',
    "title": "x" * 1000,
    "scopes": ["read", "\u00b2"],
    "username": "x" * 5000,
    "password": "x" * 5000,
    "email": "x" * 5000 + "@example.com",
}
BROWSER_POSTS = [r for r, p in routes() if "post" in view_methods(p) and not r.startswith("api/")]


@pytest.mark.parametrize("route", BROWSER_POSTS)
def test_odd_form_values_on_every_page_never_give_a_500(tenant_a, members, world, route):
    browser = Client()
    browser.force_login(members[Role.ADMIN].user)
    response = browser.post(fill(route, world), ODD_FORM)
    assert response.status_code < 500, (route, response.status_code)
