"""A writer's own TTL on a fact (LangGraph's `ttl`, in minutes): enforced by the retention sweep,
refreshed by reads that ask, never past the category's policy."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.test import Client
from django.utils import timezone

from memory import category_rules
from memory.facts import retention, services
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import facts_of, remember

pytestmark = pytest.mark.django_db


@pytest.fixture
def ada(members):
    return members["member"]


@pytest.fixture
def api(tenant_a):
    return Client(HTTP_AUTHORIZATION=f"Bearer {factories.make_api_key(tenant_a, ['read']).raw}")


def put(ada, **kwargs):
    key = factories.make_api_key(ada.tenant, ["write"]).raw
    body = {"category": "note", "key": "k", **kwargs}
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}").post(
        f"/api/v1/memory/subjects/{ada.user_id}/facts",
        json.dumps(body),
        content_type="application/json",
    )


def minutes_from_now(when: dt.datetime) -> float:
    return (when - timezone.now()).total_seconds() / 60


def test_a_fact_with_a_ttl_expires_then_and_the_sweep_deletes_it(ada):
    created = put(ada, value={"a": 1}, ttl_minutes=5)
    assert created.status_code == 201 and created.json()["ttl_minutes"] == 5
    keep = remember(ada, "Likes tea")  # no TTL: kept
    [fact] = [f for f in facts_of(ada) if f.value]
    assert 4.9 < minutes_from_now(fact.expires_at) <= 5
    assert retention.purge_expired_facts(now=timezone.now() + dt.timedelta(minutes=4)) == 0
    assert retention.purge_expired_facts(now=timezone.now() + dt.timedelta(minutes=6)) == 1
    assert [f.pk for f in facts_of(ada)] == [keep.pk]


def test_a_ttl_never_outlives_the_categorys_policy(ada, members):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        services.policy_set(actor=admin, category="note", ttl_days=1)
    put(ada, text="Short lived", ttl_minutes=60 * 24 * 30)  # 30 days asked, 1 allowed
    [fact] = facts_of(ada)
    assert 23.9 * 60 < minutes_from_now(fact.expires_at) <= 24 * 60


def test_changing_the_policy_keeps_a_facts_own_shorter_ttl(ada, members):
    put(ada, text="Short lived", ttl_minutes=10)
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        services.policy_set(actor=admin, category="note", ttl_days=30)
    [fact] = facts_of(ada)
    assert 9.9 < minutes_from_now(fact.expires_at) <= 10
    with tenant_scope(admin.tenant.pk):
        services.policy_set(actor=admin, category="note", ttl_days=None)
    [fact] = facts_of(ada)
    assert 9.9 < minutes_from_now(fact.expires_at) <= 10


def test_reading_with_refresh_ttl_moves_the_expiry_and_a_plain_read_does_not(ada, api, monkeypatch):
    put(ada, value={"a": 1}, ttl_minutes=10)
    [before] = facts_of(ada)
    later = timezone.now() + dt.timedelta(minutes=8)
    monkeypatch.setattr(category_rules, "now", lambda: later)
    url = f"/api/v1/memory/subjects/{ada.user_id}/facts"
    assert api.get(url, {"key": "k"}).status_code == 200
    assert facts_of(ada)[0].expires_at == before.expires_at
    answer = api.get(url, {"key": "k", "refresh_ttl": "true"})  # a read-only key may
    assert answer.status_code == 200
    [after] = facts_of(ada)
    assert after.expires_at == later + dt.timedelta(minutes=10)
    assert answer.json()["results"][0]["expires_at"] == after.expires_at.isoformat()


def test_a_refresh_never_passes_the_policy_counted_from_the_last_write(ada, members, monkeypatch):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        services.policy_set(actor=admin, category="note", ttl_days=1)
    put(ada, value={"a": 1}, ttl_minutes=60 * 20)
    [fact] = facts_of(ada)
    later = timezone.now() + dt.timedelta(hours=10)
    monkeypatch.setattr(category_rules, "now", lambda: later)
    with tenant_scope(ada.tenant_id):
        services.facts_refresh_ttl(tenant_id=ada.tenant_id, facts=[fact])
    [after] = facts_of(ada)
    assert after.expires_at == fact.updated_at + dt.timedelta(days=1)


def test_refresh_leaves_facts_without_a_ttl_alone(ada, api):
    remember(ada, "Likes tea", category="note")
    url = f"/api/v1/memory/subjects/{ada.user_id}/facts"
    assert api.get(url, {"refresh_ttl": "true"}).status_code == 200
    assert facts_of(ada)[0].expires_at is None


def test_writing_the_same_fact_again_takes_the_new_writes_ttl(ada):
    put(ada, value={"a": 1}, ttl_minutes=10)
    again = put(ada, value={"a": 1})
    assert again.status_code == 200
    [fact] = facts_of(ada)
    assert (fact.ttl_minutes, fact.expires_at) == (None, None)


@pytest.mark.parametrize(
    "params",
    [{"refresh_ttl": "maybe"}, {"ids": "not-a-uuid"}, {"key": "k" * 201}],
)
def test_bad_list_parameters_are_a_400(ada, api, params):
    response = api.get(f"/api/v1/memory/subjects/{ada.user_id}/facts", params)
    assert response.status_code == 400 and response.json()["code"] == "invalid"


def test_the_list_filters_by_key_and_ids(ada, api):
    put(ada, value={"a": 1})
    other = remember(ada, "Likes tea")
    url = f"/api/v1/memory/subjects/{ada.user_id}/facts"
    assert [f["key"] for f in api.get(url, {"key": "k"}).json()["results"]] == ["k"]
    by_id = api.get(url, {"ids": [str(other.pk)]}).json()["results"]
    assert [f["id"] for f in by_id] == [str(other.pk)]


def test_support_access_reads_but_never_refreshes(ada, members, client_for, monkeypatch):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        services.support_access_set(actor=admin, enabled=True)
    put(ada, value={"a": 1}, ttl_minutes=10)
    [before] = facts_of(ada)
    monkeypatch.setattr(category_rules, "now", lambda: timezone.now() + dt.timedelta(minutes=8))
    url = f"/api/v1/memory/subjects/{ada.user_id}/facts"
    response = client_for("manager").get(url, {"refresh_ttl": "true"})
    assert response.status_code == 200 and len(response.json()["results"]) == 1
    assert facts_of(ada)[0].expires_at == before.expires_at
    own = client_for("member").get(url, {"refresh_ttl": "true"})  # ada herself may
    assert own.status_code == 200
    assert facts_of(ada)[0].expires_at > before.expires_at
