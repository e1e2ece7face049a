"""AgentStateStore (sdk/python) against the live server: a LangGraph store whose items are
facts on the person's privacy page, under the same rules as every other write."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
from typing import TypedDict

import pytest
from agentstate_client import AgentStateError, AgentStateStore
from django.test import Client
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError

from memory.models import MemoryFact
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import facts_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ada(tenant_a):
    return factories.make_member(tenant_a, Role.MEMBER, user=factories.make_user("ada"))


@pytest.fixture
def store(console_url, tenant_a) -> AgentStateStore:
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    return AgentStateStore(console_url, api_key=key)


def test_an_item_put_is_a_fact_of_that_person_and_get_returns_it(store, ada):
    store.put(
        ("memories", "ada"), "contact.channel", {"text": "Prefers email", "category": "preference"}
    )

    [fact] = facts_of(ada)
    assert (fact.key, fact.text, fact.category, fact.source_kind) == (
        "contact.channel", "Prefers email", "preference", "api"
    )  # fmt: skip
    item = store.get(("memories", "ada"), "contact.channel")
    assert item.value == {"text": "Prefers email", "category": "preference"}
    assert item.key == "contact.channel" and item.namespace == ("memories", "ada")


def test_a_new_value_for_a_key_supersedes_the_old_one(store, ada):
    store.put(("memories", "ada"), "contact.channel", {"text": "Prefers email"})
    store.put(("memories", "ada"), "contact.channel", {"text": "Prefers phone"})

    assert store.get(("memories", "ada"), "contact.channel").value["text"] == "Prefers phone"
    assert [f.text for f in facts_of(ada, live_only=True)] == ["Prefers phone"]


def test_a_fact_the_person_deleted_on_the_privacy_page_is_gone_for_the_store(store, ada):
    store.put(("memories", "ada"), "home.city", {"text": "Lives in Lyon", "category": "profile"})
    [fact] = facts_of(ada)
    page = Client()
    page.force_login(ada.user)  # ada on her privacy page, pressing Delete
    response = page.post(f"/memory/facts/{fact.pk}/delete/")
    assert response.status_code in (200, 204, 302)
    assert facts_of(ada) == []
    assert store.get(("memories", "ada"), "home.city") is None


def test_a_value_holding_a_secret_is_refused_and_nothing_is_stored(store, ada):
    with pytest.raises(AgentStateError) as refused:
        store.put(("memories", "ada"), "card", {"text": "Card 4111 1111 1111 1111"})
    # As the REST API answers it: 422 secret_refused.
    assert (refused.value.status, refused.value.code) == (422, "secret_refused")
    assert facts_of(ada) == []


def test_search_ranks_the_persons_facts_and_deleting_by_put_none_forgets(store, ada):
    store.put(("memories", "ada"), "seat", {"text": "Prefers window seats on trains"})
    store.put(("memories", "ada"), "food", {"text": "Is vegetarian", "category": "preference"})

    hits = store.search(("memories", "ada"), query="window seat", limit=1)
    assert [h.key for h in hits] == ["seat"] and hits[0].score > 0
    prefs = store.search(("memories", "ada", "preference"))
    assert [h.key for h in prefs] == ["food"]

    store.delete(("memories", "ada"), "seat")
    assert store.get(("memories", "ada"), "seat") is None
    assert [f.key for f in facts_of(ada)] == ["food"]


def test_another_tenants_person_is_not_found_and_bad_namespaces_are_refused(
    console_url, tenant_b, ada
):
    other = AgentStateStore(console_url, factories.make_api_key(tenant_b, ["read", "write"]).raw)
    with pytest.raises(AgentStateError) as missing:
        other.get(("memories", "ada"), "contact.channel")
    assert missing.value.status == 404
    with pytest.raises(InvalidNamespaceError):
        other.get(("users", "ada"), "x")


def test_the_async_api_works_too(store, ada):
    async def scenario():
        await store.aput(("memories", "ada"), "tz", {"text": "Lives in CET"})
        return await store.aget(("memories", "ada"), "tz")

    # In its own thread: an earlier test may have left an event loop running in this one.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        item = pool.submit(asyncio.run, scenario()).result()
    assert item.value["text"] == "Lives in CET"


def test_a_langgraph_graph_remembers_through_the_store(store, ada):
    # The example of docs/integrations.md.
    class State(TypedDict):
        user: str
        said: str

    def remember(state: State, *, store: BaseStore) -> State:
        store.put(("memories", state["user"]), "seat", {"text": state["said"]})
        return state

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    graph = builder.compile(store=store)
    graph.invoke({"user": "ada", "said": "Prefers window seats"})

    assert [(f.key, f.text) for f in facts_of(ada)] == [("seat", "Prefers window seats")]


# --- any JSON value, TTLs, namespaces -------------------------------------------------------------

ODD = {
    "profile": {"name": "Ada Lovelace", "langs": ["fr", "en"], "born": 1815, "vip": True},
    "orders": [{"id": 1, "items": [{"sku": "A-1", "qty": 2}]}, {"id": 2, "items": []}],
    "émoji": "🚲 vélo", "日本語": "こんにちは", "fax": None, "ratio": 0.25, "big": 2**70,
    "empty": {}, "none": [],
}  # fmt: skip


def test_any_json_value_round_trips_and_is_a_fact_of_that_person(store, ada):
    store.put(("memories", "ada", "profile"), "card", ODD)
    item = store.get(("memories", "ada"), "card")
    assert item.value == ODD
    [fact] = facts_of(ada)
    assert (fact.category, fact.value, fact.source_kind) == ("profile", ODD, "api")
    assert "profile.name: Ada Lovelace" in fact.text.splitlines()
    # Searched by its words, answered whole.
    [hit] = store.search(("memories", "ada"), query="Lovelace")
    assert (hit.key, hit.value, hit.namespace) == ("card", ODD, ("memories", "ada", "profile"))


def test_a_secret_deep_inside_a_value_is_refused_and_nothing_is_stored(store, ada):
    value = {"wallet": {"cards": [{"label": "work", "number": "4111 1111 1111 1111"}]}}
    with pytest.raises(AgentStateError) as refused:
        store.put(("memories", "ada"), "wallet", value)
    assert (refused.value.status, refused.value.code) == (422, "secret_refused")
    assert facts_of(ada) == []


def test_a_value_too_large_is_refused_with_the_limit(store, ada):
    with pytest.raises(AgentStateError) as refused:
        store.put(("memories", "ada"), "big", {"blob": "x" * 20_000})
    assert refused.value.status == 413 and "16,384" in refused.value.message
    assert facts_of(ada) == []


def test_a_ttl_makes_the_fact_expire_and_the_sweep_deletes_it(store, ada):
    from django.utils import timezone

    from memory.facts import retention

    store.put(("memories", "ada"), "soon", {"step": 1}, ttl=5)
    store.put(("memories", "ada"), "kept", {"step": 2})
    [soon] = [f for f in facts_of(ada) if f.key == "soon"]
    assert soon.ttl_minutes == 5 and soon.expires_at is not None
    assert retention.purge_expired_facts(now=timezone.now() + dt.timedelta(minutes=6)) == 1
    assert store.get(("memories", "ada"), "soon") is None
    assert store.get(("memories", "ada"), "kept").value == {"step": 2}


def test_reads_refresh_the_ttl_and_ttl_config_gives_the_default(console_url, tenant_a, ada):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    with AgentStateStore(console_url, key, ttl={"default_ttl": 10}) as store:
        store.put(("memories", "ada"), "k", {"a": 1})
        [fact] = facts_of(ada)
        assert fact.ttl_minutes == 10
        with tenant_scope(ada.tenant_id):  # as if written long ago
            MemoryFact.objects.filter(pk=fact.pk).update(
                expires_at=fact.expires_at - dt.timedelta(minutes=9)
            )
        store.get(("memories", "ada"), "k", refresh_ttl=False)
        assert facts_of(ada)[0].expires_at < fact.expires_at - dt.timedelta(minutes=8)
        store.get(("memories", "ada"), "k")  # refresh_on_read: True by default
        assert facts_of(ada)[0].expires_at >= fact.expires_at
        with tenant_scope(ada.tenant_id):
            MemoryFact.objects.filter(pk=fact.pk).update(
                expires_at=fact.expires_at - dt.timedelta(minutes=9)
            )
        store.search(("memories", "ada"))
        assert facts_of(ada)[0].expires_at >= fact.expires_at


def test_list_namespaces_lists_people_and_categories_with_facts(
    store, console_url, tenant_a, ada, tenant_b
):
    factories.make_member(tenant_a, user=factories.make_user("bob"))
    store.put(("memories", "ada", "preference"), "tea", {"text": "Likes tea"})
    store.put(("memories", "ada", "profile"), "city", {"city": "Lyon"})
    store.put(("memories", "bob"), "note", {"x": 1})

    assert store.list_namespaces() == [
        ("memories", "ada", "preference"),
        ("memories", "ada", "profile"),
        ("memories", "bob", "note"),
    ]
    assert store.list_namespaces(prefix=("memories", "ada")) == [
        ("memories", "ada", "preference"),
        ("memories", "ada", "profile"),
    ]
    assert store.list_namespaces(suffix=("note",)) == [("memories", "bob", "note")]
    assert store.list_namespaces(max_depth=2) == [("memories", "ada"), ("memories", "bob")]
    assert store.list_namespaces(limit=1, offset=1) == [("memories", "ada", "profile")]
    # Each listed namespace finds its facts.
    for namespace in store.list_namespaces():
        assert store.search(namespace)
    with AgentStateStore(console_url, factories.make_api_key(tenant_b, ["read"]).raw) as other:
        assert other.list_namespaces() == []


def test_a_graph_keeps_and_reads_json_values_through_the_store(store, ada):
    class State(TypedDict):
        user: str
        order: dict
        seen: dict

    def remember(state: State, *, store: BaseStore) -> dict:
        store.put(("memories", state["user"], "task_outcome"), "last_order", state["order"])
        return {}

    def recall(state: State, *, store: BaseStore) -> dict:
        return {"seen": store.get(("memories", state["user"]), "last_order").value}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    graph = builder.compile(store=store)
    order = {"id": 1042, "lines": [{"sku": "A-1", "qty": 2, "price": 9.5}], "gift": False}
    out = graph.invoke({"user": "ada", "order": order, "seen": {}})

    assert out["seen"] == order
    [fact] = facts_of(ada)
    assert (fact.category, fact.value) == ("task_outcome", order)
