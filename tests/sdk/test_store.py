"""AgentStateStore (sdk/python) against the live server: a LangGraph store whose items are
facts on the person's privacy page, under the same rules as every other write."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TypedDict

import pytest
from agentstate_client import AgentStateError, AgentStateStore
from django.test import Client
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError

from tenants.models import Role
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
