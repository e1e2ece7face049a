"""Bulk writes: `POST /api/v1/memory/subjects/{id}/facts:batch`, each item answered as the single
POST would have answered it, in order; bad bodies, idempotency, roles, one embedding task."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.db import transaction
from django.test import Client
from django.urls import resolve

from core.errors import AppError
from memory.facts import services
from memory.facts.remember import fact_remember, facts_remember
from memory.models import MemoryFact
from tenants import throttling
from tenants.models import IdempotencyRecord
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import facts_of, remember

pytestmark = pytest.mark.django_db
WHO = ["admin", "manager", "member", "viewer", "outsider"]
CARD = "Pays with card 4111 1111 1111 1111"
API_KEY = "Our api key is sk_live_abcdefghijklmnop1234"


def url(membership) -> str:
    return f"/api/v1/memory/subjects/{membership.user_id}/facts:batch"


def post_batch(client, membership, facts, **headers):
    return client.post(
        url(membership), json.dumps({"facts": facts}), content_type="application/json", **headers
    )


def fact(text: str, category: str = "preference", **more):
    return {"category": category, "text": text, **more}


@pytest.fixture
def api(tenant_a):
    key = factories.make_api_key(tenant_a, ["read", "write"])
    return Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")


@pytest.fixture
def ada(members):
    return members["member"]


@pytest.fixture
def scheduled(monkeypatch):
    """Every call to schedule embedding: (tenant id, fact ids)."""
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(
        services, "schedule_embedding", lambda t, ids: calls.append((str(t), list(map(str, ids))))
    )
    return calls


def texts(membership) -> list[str]:
    return sorted(f.text for f in facts_of(membership, live_only=True))


# --- writing --------------------------------------------------------------------------------------


def test_a_batch_writes_every_valid_item_and_answers_each_in_order(api, ada):
    items = [fact(f"Likes colour number {n}") for n in range(5)]
    response = post_batch(api, ada, items)
    assert response.status_code == 200
    body = response.json()
    assert (body["created"], body["refreshed"], body["refused"]) == (5, 0, 0)
    assert [r["index"] for r in body["results"]] == [0, 1, 2, 3, 4]
    assert [r["status"] for r in body["results"]] == [201] * 5
    assert [r["fact"]["text"] for r in body["results"]] == [i["text"] for i in items]
    assert all(r["fact"]["source"]["kind"] == "api" for r in body["results"])
    stored = {str(f.pk): f.text for f in facts_of(ada)}
    assert stored == {r["fact"]["id"]: r["fact"]["text"] for r in body["results"]}


def test_an_item_holding_a_secret_is_refused_with_its_code_while_the_others_are_written(api, ada):
    items = [fact("Likes tea"), fact(CARD), fact("Lives in Lyon", "profile"), fact(API_KEY)]
    body = post_batch(api, ada, items).json()
    assert [r["status"] for r in body["results"]] == [201, 422, 201, 422]
    refused = [body["results"][1]["error"], body["results"][3]["error"]]
    assert [e["code"] for e in refused] == ["secret_refused", "secret_refused"]
    assert [e["detail"]["kind"] for e in refused] == ["card_number", "api_key"]
    assert "4111" not in json.dumps(body) and "sk_live" not in json.dumps(body)
    assert texts(ada) == ["Likes tea", "Lives in Lyon"]
    assert body["refused"] == 2 and body["created"] == 2


@pytest.mark.parametrize(
    "item,status,code",
    [
        (fact("Likes jazz", "gossip"), 400, "unknown_category"),
        (fact("x" * 1001), 400, "text_too_long"),
        (fact("   "), 400, "empty_text"),
        (fact("Likes jazz", key="no spaces allowed"), 400, "invalid_key"),
        ({"category": "preference"}, 400, "invalid"),
        (fact("Likes jazz", confidence=2), 400, "invalid"),
        (fact("Likes jazz", occurred_at="last tuesday"), 400, "invalid"),
        ("Likes jazz", 400, "invalid"),
    ],
)
def test_an_item_the_single_post_refuses_is_refused_alone_with_the_same_code(
    api, ada, item, status, code
):
    single = api.post(
        f"/api/v1/memory/subjects/{ada.user_id}/facts",
        json.dumps(item),
        content_type="application/json",
    )
    assert (single.status_code, single.json()["code"]) == (status, code)
    body = post_batch(api, ada, [fact("Likes tea"), item, fact("Likes coffee")]).json()
    assert [r["status"] for r in body["results"]] == [201, status, 201]
    assert body["results"][1]["error"]["code"] == code
    assert texts(ada) == ["Likes coffee", "Likes tea"]


def test_the_same_text_twice_in_a_batch_refreshes_rather_than_duplicates(api, ada):
    items = [
        fact("Likes tea", confidence=0.5),
        fact("likes  TEA.", confidence=0.9),
        fact("Likes tea", confidence=0.7),
    ]
    body = post_batch(api, ada, items).json()
    assert [r["status"] for r in body["results"]] == [201, 200, 200]
    assert len({r["fact"]["id"] for r in body["results"]}) == 1
    assert [r["fact"]["confidence"] for r in body["results"]] == [0.5, 0.9, 0.9]
    assert (body["created"], body["refreshed"]) == (1, 2)
    [stored] = facts_of(ada)
    assert stored.text == "Likes tea" and stored.confidence == 0.9


def test_a_key_used_twice_in_a_batch_supersedes_in_order(api, ada):
    items = [
        fact("Prefers phone", key="contact.channel"),
        fact("Prefers email", key="contact.channel"),
        fact("Prefers SMS", key="contact.channel"),
    ]
    body = post_batch(api, ada, items).json()
    assert [r["status"] for r in body["results"]] == [201, 201, 201]
    ids = [r["fact"]["id"] for r in body["results"]]
    # Each answer is the fact as it stood then: live when written.
    assert all(r["fact"]["valid_until"] is None for r in body["results"])
    versions = facts_of(ada)
    assert [f.text for f in versions] == ["Prefers phone", "Prefers email", "Prefers SMS"]
    assert [str(f.pk) for f in versions] == ids
    assert [str(f.superseded_by_id) for f in versions[:2]] == ids[1:]
    assert [f.valid_until is None for f in versions] == [False, False, True]
    assert len({f.lineage for f in versions}) == 1
    assert versions[0].valid_until < versions[1].valid_until == versions[2].valid_from


def test_a_batch_refreshes_and_supersedes_the_facts_stored_before_it(api, ada):
    tea = remember(ada, "Likes tea", confidence=0.4)
    phone = remember(ada, "Prefers phone", key="contact.channel")
    body = post_batch(
        api,
        ada,
        [fact("Likes tea", confidence=0.8), fact("Prefers email", key="contact.channel")],
    ).json()
    assert [r["status"] for r in body["results"]] == [200, 201]
    assert body["results"][0]["fact"]["id"] == str(tea.pk)
    with tenant_scope(ada.tenant_id):
        tea.refresh_from_db()
        phone.refresh_from_db()
    assert tea.confidence == 0.8
    assert str(phone.superseded_by_id) == body["results"][1]["fact"]["id"]
    assert texts(ada) == ["Likes tea", "Prefers email"]


def test_occurred_at_is_stored(api, ada):
    body = post_batch(
        api,
        ada,
        [fact("Went to the museum", "note", occurred_at="2023-05-07T10:00:00+02:00"), fact("Hi")],
    ).json()
    when = dt.datetime(2023, 5, 7, 8, 0, tzinfo=dt.UTC)
    assert dt.datetime.fromisoformat(body["results"][0]["fact"]["occurred_at"]) == when
    stored = {f.text: f for f in facts_of(ada)}
    assert stored["Went to the museum"].occurred_at == when
    assert stored["Hi"].occurred_at == stored["Hi"].valid_from  # default: when it was written


def test_embedding_is_scheduled_once_for_the_whole_batch(api, ada, scheduled):
    remember(ada, "Prefers phone", key="contact.channel")
    scheduled.clear()
    items = [fact(f"Owns book {n}") for n in range(20)]
    items += [fact("Owns book 3"), fact(CARD), fact("Prefers email", key="contact.channel")]
    body = post_batch(api, ada, items).json()
    written = [r["fact"]["id"] for r in body["results"] if r["status"] == 201]
    assert len(written) == 21
    assert scheduled == [(str(ada.tenant_id), written)]


def test_a_category_cap_evicts_the_least_recently_updated_facts_as_it_goes(api, ada, members):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        services.policy_set(actor=admin, category="diet", max_facts_per_subject=2)
    remember(ada, "Vegetarian", category="diet")
    remember(ada, "No nuts", category="diet")
    items = [fact("Vegetarian", "diet"), fact("No gluten", "diet"), fact("No dairy", "diet")]
    body = post_batch(api, ada, items).json()
    assert [r["status"] for r in body["results"]] == [200, 201, 201]
    # "No nuts" was the stalest once "Vegetarian" was refreshed; then "Vegetarian" went.
    assert texts(ada) == ["No dairy", "No gluten"]


# --- the same as one by one -----------------------------------------------------------------------


def _one_by_one(membership, items) -> list[tuple]:
    answers = []
    with tenant_scope(membership.tenant_id):
        for item in items:
            before = set(_live_ids(membership))
            try:  # a savepoint, as a step's proposal has: fact_remember brings none
                with transaction.atomic():
                    got = fact_remember(
                        tenant_id=membership.tenant_id,
                        subject_id=membership.user_id,
                        source_kind="api",
                        **item,
                    )
            except AppError as exc:
                answers.append((exc.code,))
                continue
            answers.append(_shape(got, refreshed=got.pk in before))
    return answers


def _live_ids(membership):
    return (
        MemoryFact.objects.for_tenant(membership.tenant_id)
        .filter(subject_id=membership.user_id, valid_until__isnull=True)
        .values_list("pk", flat=True)
    )


def _shape(f, *, refreshed: bool) -> tuple:
    return (refreshed, f.category, f.key, f.text, f.confidence, f.valid_until is None)


def _state(membership) -> list[tuple]:
    rows = facts_of(membership)
    first = {}
    for f in rows:
        first.setdefault(f.lineage, f.text)
    return sorted(
        (first[f.lineage], f.category, f.key, f.text, f.confidence, f.valid_until is None)
        for f in rows
    )


def test_a_batch_leaves_what_the_same_items_would_leave_one_by_one(members, tenant_a):
    admin = factories.principal_for(members["admin"])
    with tenant_scope(tenant_a.pk):
        services.policy_set(actor=admin, category="diet", max_facts_per_subject=3)
    one, other = members["member"], members["viewer"]
    seed = [
        fact("Vegetarian", "diet"),
        fact("Lives in Lyon", "profile", key="home"),
        fact("Prefers to be contacted by email", "note"),
    ]
    items = seed + [
        fact("prefers being contacted by email", "note", confidence=0.2),  # a near-duplicate
        fact("Note number 1 about tulips", "note"),
        fact("Note number 2 about tulips", "note"),  # a number apart: another fact
        fact("note number 2 about the tulips", "note"),
        fact("No nuts", "diet", confidence=0.3),
        fact("Lives in Paris", "note", key="home"),  # a key moves the fact to another category
        fact("no nuts!", "diet", confidence=0.6),
        fact("No gluten", "diet"),
        fact("No dairy", "diet"),  # over the cap: the stalest goes
        fact(CARD),
        fact("Lives in Nice", "profile", key="home"),
        fact("No soy", "diet", key="soy"),
        fact("No soy", "diet", key="soy"),
        fact("Vegan", "diet"),
        fact("Likes jazz", "gossip"),
    ]
    for membership in (one, other):
        _one_by_one(membership, seed)
    expected = _one_by_one(one, items)
    with tenant_scope(tenant_a.pk):
        got = facts_remember(
            tenant_id=tenant_a.pk, subject_id=other.user_id, facts=items, source_kind="api"
        )
    shapes = [
        (o.code,) if isinstance(o, AppError) else _shape(o.fact, refreshed=not o.created)
        for o in got
    ]
    assert shapes == expected
    assert _state(other) == _state(one)


# --- bad bodies -----------------------------------------------------------------------------------


def test_more_than_500_facts_are_a_400_and_write_nothing(api, ada, scheduled):
    response = post_batch(api, ada, [fact(f"Owns book {n}") for n in range(501)])
    assert response.status_code == 400
    assert response.json()["code"] == "invalid" and "facts" in response.json()["fields"]
    assert facts_of(ada) == [] and scheduled == []
    assert post_batch(api, ada, [fact(f"Owns book {n}") for n in range(500)]).status_code == 200


@pytest.mark.parametrize(
    "raw,code",
    [
        ("this is not json", "malformed_request"),
        ('{"facts": {"category": "preference", "text": "Likes tea"}}', "invalid"),
        ('[{"category": "preference", "text": "Likes tea"}]', "invalid"),
        ('{"facts": []}', "invalid"),
        ('{"fact": [{"category": "preference", "text": "Likes tea"}]}', "invalid"),
    ],
)
def test_a_body_that_is_not_a_list_of_facts_is_a_400_and_writes_nothing(api, ada, raw, code):
    response = api.post(url(ada), raw, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == code
    assert facts_of(ada) == []


def test_the_service_refuses_more_than_500_facts_too(tenant_a, ada):
    with tenant_scope(tenant_a.pk), pytest.raises(AppError):
        facts_remember(tenant_id=tenant_a.pk, subject_id=ada.user_id, facts=[fact("Hi")] * 501)


# --- idempotency ----------------------------------------------------------------------------------


def test_the_same_idempotency_key_twice_answers_the_same_and_writes_once(api, ada, scheduled):
    items = [fact("Likes tea"), fact(CARD), fact("Prefers email", key="contact.channel")]
    first = post_batch(api, ada, items, HTTP_IDEMPOTENCY_KEY="batch-1")
    again = post_batch(api, ada, items, HTTP_IDEMPOTENCY_KEY="batch-1")
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert len(facts_of(ada)) == 2 and len(scheduled) == 1
    other = post_batch(api, ada, items[:1], HTTP_IDEMPOTENCY_KEY="batch-1")
    assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
    with tenant_scope(ada.tenant_id):
        assert IdempotencyRecord.objects.for_tenant(ada.tenant_id).count() == 1


# --- who may ------------------------------------------------------------------------------------

WRITE_MEMBERS_FACTS = {"admin": 404, "manager": 404, "member": 200, "viewer": 403, "outsider": 404}


@pytest.mark.parametrize("who", WHO)
def test_a_batch_about_a_member_is_for_that_member_alone(client_for, ada, who):
    response = post_batch(client_for(who), ada, [fact("Likes tea")])
    assert response.status_code == WRITE_MEMBERS_FACTS[who]
    assert len(facts_of(ada)) == (1 if who == "member" else 0)
    if who == "member":
        assert response.json()["results"][0]["fact"]["source"]["kind"] == "user"


def test_another_tenants_subject_is_404_and_nothing_is_written(api, outsider, scheduled):
    response = post_batch(api, outsider, [fact("Likes tea")])
    assert response.status_code == 404 and response.json()["code"] == "not_found"
    assert facts_of(outsider) == [] and scheduled == []


def test_a_read_only_key_is_403_and_writes_nothing(tenant_a, ada):
    key = factories.make_api_key(tenant_a, ["read"])
    reader = Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")
    response = post_batch(reader, ada, [fact("Likes tea")])
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    assert facts_of(ada) == []


def test_a_batch_counts_against_the_write_rate_limit():
    view = resolve("/api/v1/memory/subjects/1/facts:batch").func.view_class
    assert throttling.bucket_for(view, "POST") == "write"


def test_the_schema_documents_the_batch_endpoint(db):
    schema = Client().get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/memory/subjects/{subject_id}/facts:batch"]["post"]
    assert "Idempotency-Key" in {p["name"] for p in operation["parameters"]}
    assert set(operation["responses"]) >= {"200", "400", "403", "404"}
    items = schema["components"]["schemas"]["FactBatch"]["properties"]["facts"]
    assert items["items"]["$ref"].endswith("/FactCreate")
