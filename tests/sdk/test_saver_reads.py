"""The saver's one-checkpoint read (`get_tuple`, at the start of every graph run) served by
the lean door (agents/web/langgraph_reads.py): the same answer as the Django view, by its
general path and by its one statement, the same refusals, and every other read left to
Django."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from django.test import Client as DjangoClient
from django.utils import timezone

from agents.runtime import external_fast
from agents.web import langgraph_reads
from agents.web.langgraph_steps import recent_keys
from tenants.models import ApiKey
from tenants.scope import tenant_scope
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True)]

BIG = bytes(range(256)) * 2  # longer than a base64 line (PostgreSQL's encode() wraps at 76)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def save_thread(key: str, thread: str) -> None:
    """Three checkpoints with channel values, and pending writes on the last."""
    ops = []
    for i in range(1, 4):
        ops.append(
            {
                "op": "put", "thread_id": thread, "checkpoint_id": str(i),
                "parent_checkpoint_id": str(i - 1) if i > 1 else "", "type": "json",
                "blob": b64(BIG + bytes([i])), "metadata": {"step": i, "source": "loop"},
                "channel_versions": {"a": str(i), "b": "1", "zz": str(i)},
                "blobs": [
                    {"channel": "a", "version": str(i), "type": "json", "blob": b64(b"A" * i)},
                    {"channel": "zz", "version": str(i), "type": "bytes", "blob": b64(BIG)},
                ] + ([{"channel": "b", "version": "1", "type": "json", "blob": b64(b"")}]
                     if i == 1 else []),
                "next": ["n"],
            }
        )  # fmt: skip
    ops.append(
        {
            "op": "writes", "thread_id": thread, "checkpoint_id": "3", "task_id": "task",
            "task_path": "~n", "writes": [
                {"idx": 1, "channel": "b", "type": "json", "blob": b64(b"2")},
                {"idx": 0, "channel": "a", "type": "json", "blob": b64(BIG)},
            ],
        }
    )  # fmt: skip
    answer = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {key}").post(
        "/api/v1/langgraph/steps", {"ops": ops}, content_type="application/json"
    )
    assert answer.status_code == 200, answer.content


def through_django(key: str, query: dict[str, str]):
    answer = DjangoClient(HTTP_AUTHORIZATION=f"Bearer {key}").get(
        "/api/v1/langgraph/checkpoints", query
    )
    return answer.status_code, answer.json()


def through_door(key: str, query: dict[str, str]):
    status, body, _ = langgraph_reads.answer(f"Bearer {key}", query)
    return status, json.loads(body) if isinstance(body, str) else body


QUERIES = [
    {"thread_id": "t", "checkpoint_ns": "", "limit": "1"},
    {"thread_id": "t", "limit": "1"},
    {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "2"},
    {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "9"},
    {"thread_id": "nobody", "checkpoint_ns": "", "limit": "1"},
    {"thread_id": "t", "checkpoint_ns": "sub", "limit": "1"},
]


@pytest.mark.parametrize("query", QUERIES)
def test_a_one_checkpoint_read_answers_as_the_django_view_by_both_of_its_paths(
    tenant_a, monkeypatch, query
):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    save_thread(key, "t")
    statements = []
    read = external_fast.read
    monkeypatch.setattr(
        external_fast, "read", lambda **kw: statements.append(found := read(**kw)) or found
    )
    lean = langgraph_reads.lean_query(
        {"method": "GET", "headers": [(b"authorization", f"Bearer {key}".encode())],
         "query_string": "&".join(f"{k}={v}" for k, v in query.items()).encode()}
    )  # fmt: skip
    assert lean is not None
    expected = through_django(key, query)
    recent_keys.forget(key)
    assert through_door(key, lean) == expected  # the general path (the key kept after it)
    assert through_door(key, lean) == expected  # one statement
    assert len(statements) == 1 and statements[0] is not None
    if query["thread_id"] == "t" and query.get("checkpoint_ns") == "" and query.get("limit"):
        [latest] = expected[1]["results"]
        assert latest["checkpoint_id"] == "3" and base64.b64decode(latest["blob"]) == BIG + b"\3"
        assert [(v["channel"], v["version"]) for v in latest["values"]] == [
            ("a", "3"),
            ("b", "1"),
            ("zz", "3"),
        ]
        assert [(w["idx"], w["channel"]) for w in latest["writes"]] == [(1, "b"), (0, "a")]


def test_another_tenants_key_reads_nothing_of_the_thread_by_either_path(tenant_a, tenant_b):
    save_thread(factories.make_api_key(tenant_a, ["read", "write"]).raw, "t")
    other = factories.make_api_key(tenant_b, ["read", "write"]).raw
    query = {"thread_id": "t", "checkpoint_ns": "", "limit": "1"}
    recent_keys.forget(other)
    assert through_door(other, query) == (200, {"results": []})
    assert through_door(other, query) == (200, {"results": []})  # known now: one statement


def test_the_lean_read_refuses_what_the_view_refuses(tenant_a, tenant_b):
    query = {"thread_id": "t", "checkpoint_ns": "", "limit": "1"}
    write_only = factories.make_api_key(tenant_a, ["write"]).raw
    assert through_door(write_only, query)[0] == through_django(write_only, query)[0] == 403
    for token in ("ak_-" + "0" * 31 + "_x", "nonsense", ""):
        status, body = through_door(token, query)
        assert (status, body["code"]) == (401, "unauthenticated")
        assert through_django(token, query)[0] == 401
    made = factories.make_api_key(tenant_a, ["read", "write"])
    assert through_door(made.raw, query)[0] == 200  # known from here on
    with tenant_scope(tenant_a.pk):
        ApiKey.objects.filter(pk=made.key.pk).update(revoked_at=timezone.now())
    status, body = through_door(made.raw, query)
    assert (status, body["code"]) == (401, "unauthenticated")
    person = factories.make_personal_token(factories.make_member(tenant_a))
    assert through_door(getattr(person, "raw", person), query)[0] == 401


@pytest.mark.parametrize(
    "query",
    [
        "thread_id=t",  # every checkpoint: a list
        "thread_id=t&limit=2",
        "thread_id=t&limit=1&metadata=%7B%7D",
        "thread_id=t&limit=1&before=3",
        "thread_id=%20t&limit=1",  # the serializer trims it
        "thread_id=t&thread_id=u&limit=1",
        "thread_id=&limit=1",
        "thread_id=t&checkpoint_id=&checkpoint_ns=",
        "thread_id=t%00&limit=1",
        "thread_id=%FF&limit=1",
        "thread_id=" + "x" * 201 + "&limit=1",
        "limit=1",
    ],
)
def test_every_other_read_goes_to_the_django_view(query):
    scope = {
        "method": "GET",
        "headers": [(b"authorization", b"Bearer ak_x")],
        "query_string": query.encode(),
    }
    assert langgraph_reads.lean_query(scope) is None


def test_a_read_without_a_bearer_token_or_not_a_get_goes_to_the_django_view():
    query = b"thread_id=t&limit=1"
    for method, headers in (
        ("GET", [(b"cookie", b"sessionid=x")]),
        ("GET", [(b"authorization", b"Basic eDp5")]),
        ("HEAD", [(b"authorization", b"Bearer ak_x")]),
    ):
        scope = {"method": method, "headers": headers, "query_string": query}
        assert langgraph_reads.lean_query(scope) is None
    scope = {
        "method": "GET",
        "headers": [(b"authorization", b"bearer ak_x")],
        "query_string": query,
    }
    assert langgraph_reads.lean_query(scope) == {"thread_id": "t"}


@pytest.mark.slow
def test_the_served_read_is_the_lean_doors_with_the_apis_headers(console_url, tenant_a):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    save_thread(key, "t")
    with httpx.Client(base_url=console_url, headers={"Authorization": f"Bearer {key}"}) as web:
        query = {"thread_id": "t", "checkpoint_ns": "", "limit": "1"}
        answers = [web.get("/api/v1/langgraph/checkpoints", params=query) for _ in range(2)]
        listed = web.get("/api/v1/langgraph/checkpoints", params={"thread_id": "t"})
    for answer in answers:
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/json"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.json() == through_django(key, query)[1]
    assert [c["checkpoint_id"] for c in listed.json()["results"]] == ["3", "2", "1"]
