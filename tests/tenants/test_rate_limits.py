"""API rate limits: per key or person, per tenant, counted in Redis, 429 with Retry-After."""

from __future__ import annotations

import io
import logging

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import resolve
from rest_framework.test import APIRequestFactory

from agents.runtime.models import Run
from tenants import throttling
from tenants.models import AuditEvent, Role, Tenant
from tenants.principal import Principal
from tenants.rates import BUCKETS, LANGGRAPH, Rate, parse_rate
from tenants.scope import system_scope, tenant_scope
from tests import factories
from tests.windows import clear_of_a_window_edge

RUN = {"agent": "refund_desk", "input": {"customer": "c-1", "message": "hi"}}


def api(key) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")


def start_run(client: Client):
    return client.post("/api/v1/runs", RUN, content_type="application/json")


def runs(tenant) -> int:
    with tenant_scope(tenant.pk):
        return Run.objects.for_tenant(tenant).count()


def set_overrides(tenant: Tenant, limits: dict) -> None:
    with system_scope("test_rate_limits"):
        Tenant.objects.filter(pk=tenant.pk).update(api_rate_limits=limits)


@pytest.fixture
def limits(settings):
    clear_of_a_window_edge()
    settings.API_RATE_LIMIT_READ = "5/min"
    settings.API_RATE_LIMIT_WRITE = "3/min"
    return settings


@pytest.fixture
def writer(tenant_a):
    return factories.make_api_key(tenant_a, ["read", "write"])


def test_run_starts_beyond_the_write_limit_get_429_with_retry_after_and_nothing_is_written(
    limits, writer, tenant_a
):
    client = api(writer)
    for _ in range(3):
        assert start_run(client).status_code == 201
    response = start_run(client)
    assert response.status_code == 429
    body = response.json()
    assert body["code"] == "rate_limited"
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 60
    assert f"try again in {retry_after} s" in body["message"]
    assert runs(tenant_a) == 3


def test_reads_have_their_own_budget(limits, writer):
    client = api(writer)
    for _ in range(3):
        start_run(client)
    assert start_run(client).status_code == 429
    for _ in range(5):
        assert client.get("/api/v1/runs").status_code == 200
    response = client.get("/api/v1/runs")
    assert response.status_code == 429 and response.json()["code"] == "rate_limited"


def test_keys_do_not_share_budgets(limits, writer, tenant_a):
    for _ in range(3):
        start_run(api(writer))
    assert start_run(api(writer)).status_code == 429
    other = factories.make_api_key(tenant_a, ["read", "write"])
    assert start_run(api(other)).status_code == 201


def test_console_sessions_are_limited_per_person(limits, tenant_a):
    first, second = Client(), Client()
    first.force_login(factories.make_member(tenant_a, Role.MEMBER).user)
    second.force_login(factories.make_member(tenant_a, Role.MEMBER).user)
    for _ in range(3):
        assert start_run(first).status_code == 201
    assert start_run(first).status_code == 429
    assert start_run(second).status_code == 201


def test_a_tenant_override_applies_to_that_tenant_only(limits, writer, tenant_a, tenant_b):
    set_overrides(tenant_a, {"write": "1/min"})
    assert start_run(api(writer)).status_code == 201
    assert start_run(api(writer)).status_code == 429
    other = factories.make_api_key(tenant_b, ["read", "write"])
    for _ in range(3):
        assert start_run(api(other)).status_code == 201


def test_an_override_may_raise_a_limit_or_turn_it_off(limits, writer, tenant_a):
    set_overrides(tenant_a, {"write": "off", "read": "100/min"})
    for _ in range(6):
        assert start_run(api(writer)).status_code == 201
        assert api(writer).get("/api/v1/me").status_code == 200


def test_two_tenants_count_independently(limits, writer, tenant_b):
    for _ in range(3):
        start_run(api(writer))
    assert start_run(api(writer)).status_code == 429
    assert start_run(api(factories.make_api_key(tenant_b, ["read", "write"]))).status_code == 201


def test_a_limit_off_in_the_settings_never_refuses(settings, writer):
    settings.API_RATE_LIMIT_WRITE = "off"
    for _ in range(5):
        assert start_run(api(writer)).status_code == 201


# --- which calls count as writes ------------------------------------------------------------------

WRITES = [
    ("POST", "/api/v1/runs"),
    ("POST", "/api/v1/sessions"),
    ("POST", "/api/v1/sessions/00000000-0000-0000-0000-000000000001/messages"),
    ("POST", "/api/v1/sessions/00000000-0000-0000-0000-000000000001/forks"),
    ("POST", "/api/v1/runs/00000000-0000-0000-0000-000000000001/events"),
    ("POST", "/api/v1/memory/subjects/1/facts"),
    ("PATCH", "/api/v1/memory/facts/00000000-0000-0000-0000-000000000001"),
    ("DELETE", "/api/v1/memory/facts/00000000-0000-0000-0000-000000000001"),
    ("POST", "/api/v1/memory/subjects/1/delete-all"),
    ("POST", "/api/v1/memory/subjects/1/privacy-link"),
]
READS = [
    ("GET", "/api/v1/runs"),
    ("GET", "/api/v1/sessions"),
    ("GET", "/api/v1/memory/subjects/1/facts"),
    ("GET", "/api/v1/memory/facts/00000000-0000-0000-0000-000000000001"),
    ("POST", "/api/v1/runs/00000000-0000-0000-0000-000000000001/cancel"),
    ("POST", "/api/v1/approvals/00000000-0000-0000-0000-000000000001/decision"),
    ("POST", "/api/v1/api-keys"),
    ("GET", "/api/v1/me"),
]


@pytest.mark.parametrize("method,url", WRITES)
def test_run_starts_messages_events_and_memory_writes_use_the_write_bucket(method, url):
    view = resolve(url).func.view_class
    assert throttling.bucket_for(view, method) == "write"


@pytest.mark.parametrize("method,url", READS)
def test_reads_and_light_writes_use_the_read_bucket(method, url):
    view = resolve(url).func.view_class
    assert throttling.bucket_for(view, method) == "read"


def test_every_view_declares_known_buckets_only():
    from django.urls import get_resolver

    def views(patterns):
        for p in patterns:
            if hasattr(p, "url_patterns"):
                yield from views(p.url_patterns)
            elif hasattr(p.callback, "view_class"):
                yield p.callback.view_class

    for view in views(get_resolver().url_patterns):
        declared = getattr(view, "rate_bucket", None)
        names = declared.values() if isinstance(declared, dict) else [declared]
        assert all(n in (None, *BUCKETS) for n in names), view


# --- counting -------------------------------------------------------------------------------------


def _request_for(principal: Principal):
    request = APIRequestFactory().post("/api/v1/runs")
    request.principal = principal
    from rest_framework.request import Request

    return Request(request)


def test_counting_does_not_touch_postgresql(limits, writer, django_assert_num_queries):
    request = _request_for(Principal.for_api_key(writer.key, writer.key.tenant))
    view = resolve("/api/v1/runs").func.view_class()
    with django_assert_num_queries(0):
        assert throttling.ApiRateThrottle().allow_request(request, view)


def test_without_redis_the_api_stays_open_and_warns_once(settings, writer, caplog):
    settings.API_RATE_LIMIT_WRITE = "1/min"
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    with caplog.at_level(logging.WARNING, logger="tenants.throttling"):
        for _ in range(3):
            assert start_run(api(writer)).status_code == 201
    warnings = [r for r in caplog.records if r.name == "tenants.throttling"]
    assert len(warnings) == 1 and "Redis" in warnings[0].getMessage()


# --- the rates themselves -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,rate",
    [
        ("600/min", Rate(600, 60)),
        ("60/m", Rate(60, 60)),
        ("10/s", Rate(10, 1)),
        ("5/second", Rate(5, 1)),
        ("1000/hour", Rate(1000, 3600)),
        ("20000/day", Rate(20000, 86400)),
        (" 7 / minute ", Rate(7, 60)),
        ("off", None),
    ],
)
def test_rates_are_parsed(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["", "lots", "0/min", "-1/min", "10/fortnight", "10", "1.5/s"])
def test_bad_rates_are_refused(text):
    with pytest.raises(ValueError):
        parse_rate(text)


def test_bad_rate_settings_stop_startup_naming_the_setting(settings):
    settings.API_RATE_LIMIT_WRITE = "plenty"
    with pytest.raises(ImproperlyConfigured, match="API_RATE_LIMIT_WRITE"):
        throttling.check_settings()


@pytest.mark.parametrize(
    "limits",
    [{"write": "lots"}, {"reads": "10/min"}, ["10/min"], {"read": 10}, {"write": "0/min"}],
)
def test_tenant_overrides_are_validated(tenant_a, limits):
    tenant_a.api_rate_limits = limits
    with pytest.raises(ValidationError) as raised:
        tenant_a.full_clean()
    assert "api_rate_limits" in raised.value.message_dict


def test_valid_tenant_overrides_pass(tenant_a):
    tenant_a.api_rate_limits = {"read": "1200/min", "write": "off"}
    tenant_a.full_clean()
    tenant_a.api_rate_limits = {}
    tenant_a.full_clean()


# --- setting overrides ----------------------------------------------------------------------------


def test_the_command_sets_shows_and_resets_a_tenants_overrides_and_audits_it(tenant_a):
    out = io.StringIO()
    call_command("tenant_rate_limits", tenant_a.slug, "--write", "10/min", stdout=out)
    assert "write: 10/min (override)" in out.getvalue()
    assert "read: 1000000/min (setting)" in out.getvalue()
    with system_scope("test_rate_limits"):
        assert Tenant.objects.get(pk=tenant_a.pk).api_rate_limits == {"write": "10/min"}
    call_command("tenant_rate_limits", tenant_a.slug, "--reset", stdout=io.StringIO())
    with system_scope("test_rate_limits"):
        assert Tenant.objects.get(pk=tenant_a.pk).api_rate_limits == {}
    with tenant_scope(tenant_a.pk):
        changes = AuditEvent.objects.for_tenant(tenant_a).filter(
            action="tenant.rate_limits_changed"
        )
        assert [e.after for e in changes.order_by("id")] == [{"write": "10/min"}, {}]


@pytest.mark.parametrize("args", [["--write", "lots"], ["--read", "0/min"]])
def test_the_command_refuses_a_bad_rate_and_changes_nothing(tenant_a, args):
    with pytest.raises(CommandError):
        call_command("tenant_rate_limits", tenant_a.slug, *args, stdout=io.StringIO())
    with system_scope("test_rate_limits"):
        assert Tenant.objects.get(pk=tenant_a.pk).api_rate_limits == {}


def test_the_command_refuses_an_unknown_tenant(db):
    with pytest.raises(CommandError, match="No tenant"):
        call_command("tenant_rate_limits", "nope", stdout=io.StringIO())


def test_a_busy_per_tenant_bucket_is_counted_in_blocks_and_never_lets_a_tenant_past_its_limit(
    settings, writer, monkeypatch
):
    # A graph's every step is a call: the langgraph bucket (per tenant) is counted a hundredth
    # of its limit at a time, so most steps cost no round trip to Redis.
    settings.API_RATE_LIMIT_LANGGRAPH = "1000/hour"
    principal = Principal.for_api_key(writer.key, writer.key.tenant)
    asked = []
    count = throttling._count
    monkeypatch.setattr(throttling, "_count", lambda *a, **kw: asked.append(a) or count(*a, **kw))
    for _ in range(995):
        throttling.count_call(principal, LANGGRAPH)
    throttling.count_call(principal, LANGGRAPH, 5)  # a batch of five steps: the last units
    with pytest.raises(throttling.RateLimited) as refused:
        throttling.count_call(principal, LANGGRAPH)
    assert "1000 per hour langgraph requests for this tenant" in str(refused.value.detail)
    assert len(asked) <= 1000 // 10 + 2  # blocks of ten, not a count per call


def test_a_small_per_tenant_limit_is_counted_call_by_call(settings, writer):
    settings.API_RATE_LIMIT_LANGGRAPH = "150/hour"  # under 200: no blocks
    principal = Principal.for_api_key(writer.key, writer.key.tenant)
    for _ in range(150):
        throttling.count_call(principal, LANGGRAPH)
    with pytest.raises(throttling.RateLimited):
        throttling.count_call(principal, LANGGRAPH)


def test_a_call_counted_from_the_units_reserved_ahead_costs_no_round_trip_and_never_overdraws(
    settings, writer, monkeypatch
):
    # The LangGraph door's step on the event loop counts only from what this process reserved
    # in Redis ahead; when none is left it says so, and the threads' path counts the call.
    settings.API_RATE_LIMIT_LANGGRAPH = "1000/hour"  # blocks of ten
    principal = Principal.for_api_key(writer.key, writer.key.tenant)
    assert not throttling.count_reserved(principal, LANGGRAPH)  # nothing reserved yet
    throttling.count_call(principal, LANGGRAPH)  # counts itself and a block of ten ahead
    asked = []
    monkeypatch.setattr(throttling, "_count", lambda *a, **kw: asked.append(a))
    assert [throttling.count_reserved(principal, LANGGRAPH) for _ in range(11)] == (
        [True] * 10 + [False]
    )
    assert throttling.count_reserved(principal, LANGGRAPH, 0)  # nothing to count
    assert asked == []
    settings.API_RATE_LIMIT_LANGGRAPH = "150/hour"  # counted call by call: never from a block
    assert not throttling.count_reserved(principal, LANGGRAPH)
