"""AgentStateStore without a server: what it sends, and what it refuses before sending."""

from __future__ import annotations

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


def fake_api(seen: list[httpx.Request], *, refuse: bool = False):
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path == "/api/v1/memory/subjects":
            return httpx.Response(200, json={"id": 7, "username": request.url.params["username"]})
        if path == "/api/v1/memory/subjects/7/facts" and request.method == "GET":
            return httpx.Response(200, json={"results": [FACT]})
        if path == "/api/v1/memory/subjects/7/facts" and refuse:
            body = {"code": "secret_refused", "message": "That looks like a secret."}
            return httpx.Response(422, json=body)
        if path == "/api/v1/memory/subjects/7/facts":
            return httpx.Response(201, json=FACT)
        if path.startswith("/api/v1/memory/facts/") and request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(404, json={"code": "not_found", "message": "Not found."})

    return httpx.MockTransport(handle)


def store_with(seen, **kwargs) -> AgentStateStore:
    client = Client("https://agents.example", "ak_test", transport=fake_api(seen, **kwargs))
    return AgentStateStore("https://agents.example", "ak_test", client=client)


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


def test_a_value_that_is_not_text_and_category_is_refused_before_sending():
    seen: list[httpx.Request] = []
    with pytest.raises(ValueError, match="text"):
        store_with(seen).put(("memories", "ada"), "k", {"text": "x", "secret": 1})
    assert seen == []
