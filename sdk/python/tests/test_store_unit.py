"""AgentStateStore without a server: what it sends, and what it refuses before sending."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json

import httpx
import pytest
from agentstate_client import AgentStateError, AgentStateStore, Client
from langgraph.store.base import InvalidNamespaceError

FACT = {
    "id": "0b0c8a2e-0000-4000-8000-000000000001",
    "key": "contact.channel",
    "text": "Prefers email",
    "category": "preference",
    "created_at": "2026-12-01T10:00:00+00:00",
    "valid_from": "2026-12-01T11:00:00+00:00",
}


def fake_api(seen: list[httpx.Request], *, refuse: bool = False, facts=None):
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path == "/api/v1/memory/subjects":
            return httpx.Response(200, json={"id": 7, "username": request.url.params["username"]})
        if path == "/api/v1/memory/namespaces":
            return httpx.Response(200, json={"namespaces": [["memories", "ada"]]})
        if path == "/api/v1/memory/subjects/7/facts" and request.method == "GET":
            return httpx.Response(200, json={"results": facts or [FACT]})
        if path == "/api/v1/memory/subjects/7/facts" and refuse:
            body = {"code": "secret_refused", "message": "That looks like a secret."}
            return httpx.Response(422, json=body)
        if path == "/api/v1/memory/subjects/7/facts":
            return httpx.Response(201, json=FACT)
        if path.startswith("/api/v1/memory/facts/") and request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(404, json={"code": "not_found", "message": "Not found."})

    return httpx.MockTransport(handle)


def store_with(seen, ttl=None, **kwargs) -> AgentStateStore:
    client = Client("https://agents.example", "ak_test", transport=fake_api(seen, **kwargs))
    return AgentStateStore("https://agents.example", "ak_test", client=client, ttl=ttl)


def test_a_put_posts_text_category_and_key_with_the_key_and_an_idempotency_key():
    seen: list[httpx.Request] = []
    store_with(seen).put(("memories", "ada", "preference"), "contact.channel", {"text": "Hi"})
    lookup, post = seen
    assert lookup.url.params["username"] == "ada"
    assert json.loads(post.content) == {
        "text": "Hi",
        "category": "preference",
        "key": "contact.channel",
    }
    assert post.headers["authorization"] == "Bearer ak_test"
    assert post.headers["idempotency-key"]


def test_get_finds_the_fact_by_key_with_its_times():
    item = store_with([]).get(("memories", "ada"), "contact.channel")
    assert item.value == {"text": "Prefers email", "category": "preference"}
    assert item.updated_at.isoformat() == "2026-12-01T11:00:00+00:00"
    assert store_with([]).get(("memories", "ada"), "nope") is None


def test_deleting_sends_a_delete_for_the_fact_with_that_key():
    seen: list[httpx.Request] = []
    store_with(seen).delete(("memories", "ada"), "contact.channel")
    assert (seen[-1].method, seen[-1].url.path) == (
        "DELETE",
        f"/api/v1/memory/facts/{FACT['id']}",
    )


def test_an_api_refusal_is_an_error_with_its_code():
    with pytest.raises(AgentStateError) as refused:
        store_with([], refuse=True).put(("memories", "ada"), "card", {"text": "4111..."})
    assert (refused.value.code, refused.value.status) == ("secret_refused", 422)


@pytest.mark.parametrize(
    "namespace", [("memories",), ("users", "ada"), ("memories", "ada", "x", "y"), ("memories", "")]
)
def test_namespaces_other_than_memories_of_a_person_are_refused(namespace):
    seen: list[httpx.Request] = []
    with pytest.raises(InvalidNamespaceError):
        store_with(seen).get(namespace, "k")
    assert seen == []


def test_any_other_json_object_is_sent_whole_as_the_value_in_the_namespaces_category():
    seen: list[httpx.Request] = []
    value = {"text": "x", "secret": 1, "nested": [{"a": None}], "category": 5}
    store_with(seen).put(("memories", "ada", "profile"), "k", value)
    assert json.loads(seen[-1].content) == {"value": value, "category": "profile", "key": "k"}


def test_a_value_that_is_not_a_dict_is_refused_before_sending():
    seen: list[httpx.Request] = []
    with pytest.raises(TypeError, match="dict"):
        store_with(seen).put(("memories", "ada"), "k", ["a", "list"])  # type: ignore[arg-type]
    assert seen == []


def test_get_answers_a_json_value_exactly_and_asks_for_the_key_only():
    seen: list[httpx.Request] = []
    value = {"seat": {"side": "window"}, "n": [1, 2.5, None, True]}
    fact = {**FACT, "text": "seat.side: window", "value": value}
    item = store_with(seen, facts=[fact]).get(("memories", "ada"), "contact.channel")
    assert item.value == value
    assert seen[-1].url.params["key"] == "contact.channel"
    assert seen[-1].url.params["refresh_ttl"] == "true"  # LangGraph's default


def test_a_ttl_is_sent_in_minutes_and_ttl_config_gives_the_default():
    seen: list[httpx.Request] = []
    store_with(seen).put(("memories", "ada"), "k", {"text": "Hi"}, ttl=90)
    assert json.loads(seen[-1].content)["ttl_minutes"] == 90
    store_with(seen, ttl={"default_ttl": 5}).put(("memories", "ada"), "k", {"text": "Hi"})
    assert json.loads(seen[-1].content)["ttl_minutes"] == 5
    store_with(seen, ttl={"default_ttl": 5}).put(("memories", "ada"), "k", {"a": 1}, ttl=None)
    assert "ttl_minutes" not in json.loads(seen[-1].content)


def test_refresh_on_read_false_or_refresh_ttl_false_reads_without_refreshing():
    seen: list[httpx.Request] = []
    store_with(seen, ttl={"refresh_on_read": False}).get(("memories", "ada"), "k")
    assert "refresh_ttl" not in seen[-1].url.params
    store_with(seen).get(("memories", "ada"), "k", refresh_ttl=False)
    assert "refresh_ttl" not in seen[-1].url.params


def test_search_refreshes_only_the_answered_facts_that_have_a_ttl():
    seen: list[httpx.Request] = []
    facts = [{**FACT, "ttl_minutes": 10}, {**FACT, "id": "other", "key": "other"}]
    hits = store_with(seen, facts=facts).search(("memories", "ada"))
    assert [h.key for h in hits] == ["contact.channel", "other"]
    assert hits[0].namespace == ("memories", "ada", "preference")
    assert seen[-1].url.params.get_list("ids") == [FACT["id"]]
    assert seen[-1].url.params["refresh_ttl"] == "true"


@pytest.mark.parametrize(
    ("wanted", "hit"),
    [
        ({"seat": {"side": "window"}}, True),
        ({"seat": {"side": "aisle"}}, False),
        ({"n": {"$gt": 2}}, True),
        ({"n": {"$lte": 2}}, False),
        ({"n": {"$ne": 3}}, False),
        ({"n": {"$gt": "x"}}, False),  # another type: no match, no error
    ],
)
def test_search_filters_like_langgraphs_stores(wanted, hit):
    fact = {**FACT, "value": {"seat": {"side": "window"}, "n": 3}}
    hits = store_with([], facts=[fact]).search(("memories", "ada"), filter=wanted)
    assert bool(hits) is hit


def test_list_namespaces_sends_prefix_suffix_depth_and_paging():
    seen: list[httpx.Request] = []
    found = store_with(seen).list_namespaces(
        prefix=("memories", "*"), suffix=("note",), max_depth=2, limit=5, offset=10
    )
    assert found == [("memories", "ada")]
    params = seen[-1].url.params
    assert seen[-1].url.path == "/api/v1/memory/namespaces"
    assert params.get_list("prefix") == ["memories", "*"]
    assert params.get_list("suffix") == ["note"]
    assert (params["max_depth"], params["limit"], params["offset"]) == ("2", "5", "10")


def test_the_store_closes_the_client_it_made_and_works_as_a_context_manager(monkeypatch):
    closed: list[bool] = []
    monkeypatch.setattr(Client, "close", lambda self: closed.append(True))
    with AgentStateStore("https://agents.example", "ak_test") as store:
        assert isinstance(store, AgentStateStore)
    assert closed == [True]
    given = Client("https://agents.example", "ak_test")
    AgentStateStore("https://agents.example", "ak_test", client=given).close()
    assert closed == [True]  # a client it was given is its owner's to close


def test_the_async_context_manager_closes_too(monkeypatch):
    closed: list[bool] = []

    async def aclose(self) -> None:
        closed.append(True)

    monkeypatch.setattr(Client, "aclose", aclose)

    async def scenario():
        async with AgentStateStore("https://agents.example", "ak_test"):
            pass

    # In its own thread: another test (Playwright) may have left an event loop running here.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, scenario()).result()
    assert closed == [True]
