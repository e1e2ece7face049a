"""The console's stuck card reads what the stuck sweep stored (one indexed read at any size):
at most one sweep behind, said with the time it was counted; counted afresh when no sweep
stored lately; one tenant's counts never on another's card."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.console import selectors, stuck
from agents.console.stuck import detect_stuck
from agents.runtime.models import Run, StuckCount
from core.redis_client import client as redis_client
from tenants.scope import system_scope, tenant_scope
from tests.agents.console_helpers import ago, make_run

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
LEASE = "Lease expired, not yet taken back"


def shown(html: str, label: str) -> int:
    found = re.search(rf"{re.escape(label)}</span> <strong class=\"count\">(\d+)</strong>", html)
    assert found, html
    return int(found.group(1))


def summary(client) -> str:
    response = client.get("/console/summary/", **HX)
    assert response.status_code == 200
    return re.sub(r"\s+", " ", response.content.decode())


def test_the_sweep_stores_each_tenants_counts_and_the_card_shows_them_with_when(
    client_for, tenant_a, tenant_b
):
    make_run(tenant_a, status="running", lease_owner="w", lease_expires_at=ago(5))
    make_run(tenant_a, status="running", lease_owner="w", lease_expires_at=ago(9))
    make_run(tenant_b, status="failed", error={"code": "retries_exhausted"})
    detect_stuck()
    with system_scope("test_inspection"):
        stored = set(StuckCount.objects.values_list("tenant_id", "reason", "n"))
    assert stored == {(tenant_a.pk, "lease_expired", 2), (tenant_b.pk, "retries_exhausted", 1)}
    html = summary(client_for("admin"))
    assert shown(html, LEASE) == 2
    assert shown(html, "Retries used up") == 0  # tenant B's stays on B's card
    assert "Counted at <time" in html


def test_the_card_reads_one_small_table_not_the_runs(admin, tenant_a):
    make_run(tenant_a, status="running", lease_owner="w", lease_expires_at=ago(5))
    detect_stuck()
    with tenant_scope(tenant_a.pk), CaptureQueriesContext(connection) as queries:
        card = selectors.stuck_card(admin, timezone.now())
    assert not any('"agents_run"' in q["sql"] for q in queries)
    assert {c["reason"].code: c["count"] for c in card["stuck_counts"]}["lease_expired"] == 1
    assert card["stuck_counted_at"] is not None


def test_the_card_lags_until_the_next_sweep_then_catches_up(client_for, tenant_a):
    run = make_run(tenant_a, status="running", lease_owner="w", lease_expires_at=ago(5))
    detect_stuck()
    with tenant_scope(tenant_a.pk):
        Run.objects.filter(pk=run.pk).update(status="succeeded", lease_owner="")
    client = client_for("admin")
    assert shown(summary(client), LEASE) == 1  # as the last sweep counted
    detect_stuck()
    assert shown(summary(client), LEASE) == 0


def test_without_a_recent_sweep_the_card_counts_afresh(client_for, tenant_a):
    make_run(tenant_a, status="running", lease_owner="w", lease_expires_at=ago(5))
    html = summary(client_for("admin"))  # no sweep ever ran
    assert shown(html, LEASE) == 1 and "Counted at" not in html
    detect_stuck()
    make_run(tenant_a, status="running", lease_owner="w", lease_expires_at=ago(5))
    redis_client().delete(stuck.COUNTED_KEY)  # beat stopped: its mark ran out
    html = summary(client_for("admin"))
    assert shown(html, LEASE) == 2 and "Counted at" not in html


def test_stored_counts_of_another_tenant_are_never_read(tenant_a, tenant_b):
    make_run(tenant_b, status="running", lease_owner="w", lease_expires_at=ago(5))
    detect_stuck()
    with tenant_scope(tenant_a.pk):
        counts, _ = stuck.stored_counts(tenant_b.pk)  # asked for B inside A's scope
    assert not any(counts.values())
    with tenant_scope(tenant_b.pk):
        counts, _ = stuck.stored_counts(tenant_b.pk)
    assert counts["lease_expired"] == 1
