"""Facts given as JSON objects (the LangGraph store's items): kept and answered exactly, searched
by their text, shown readably, refused like any fact (secrets anywhere inside, size, depth)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from memory.facts import values
from tests import factories
from tests.memory.conftest import facts_of, remember

pytestmark = pytest.mark.django_db


def post(client, url, data):
    return client.post(url, json.dumps(data), content_type="application/json")


@pytest.fixture
def api(tenant_a):
    key = factories.make_api_key(tenant_a, ["read", "write"])
    return Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")


@pytest.fixture
def ada(members):
    return members["member"]


def facts_url(membership) -> str:
    return f"/api/v1/memory/subjects/{membership.user_id}/facts"


ODD_VALUES = [
    {"name": "Ada", "langs": ["fr", "en"], "age": 36, "ratio": 0.5, "vip": True, "fax": None},
    {"address": {"city": "Lyon", "geo": {"lat": 45.76, "lon": 4.84}}, "tags": []},
    {"orders": [{"id": 1, "items": [{"sku": "A-1", "qty": 2}]}, {"id": 2, "items": []}]},
    {"émoji": "🚲 vélo", "日本語": "こんにちは", "rtl": "שלום", "quote": 'say "hi" \\ there'},
    {"big": 12345678901234567890, "neg": -3, "float": 1.0, "tiny": 1e-300, "nested": [[1, [2]]]},
    {"text": "Prefers window seats", "since": 2019},  # a text with more: a value, kept whole
    {"text": "Only text"},  # exactly what was put, even in the shape of a text fact
    {},
    {"empty": {}, "list": [], "blank": ""},
    {"<script>alert(1)</script>": "<b>bold</b>", "multi\nline": "a\nb"},
]


@pytest.mark.parametrize("value", ODD_VALUES)
def test_a_json_value_comes_back_exactly_as_it_was_put(api, ada, value):
    created = post(api, facts_url(ada), {"category": "note", "key": "k", "value": value})
    assert created.status_code == 201, created.json()
    assert created.json()["value"] == value
    [listed] = api.get(facts_url(ada)).json()["results"]
    assert listed["value"] == value and listed["key"] == "k"
    [fact] = facts_of(ada)
    assert fact.value == value and fact.text  # a derived text, never empty


def test_the_derived_text_has_a_line_per_leaf_with_its_path():
    cleaned = values.clean_value(
        {"tags": ["a", "b"], "text": "Likes trains", "address": {"city": "Lyon"}, "n": [{"x": 1}]}
    )
    assert cleaned.text.splitlines() == [
        "Likes trains",
        "tags: a, b",
        "address.city: Lyon",
        "n[0].x: 1",
    ]


def test_the_privacy_page_rows_follow_the_writers_order_which_jsonb_does_not_keep(ada):
    value = {"zeta": 1, "text": "Profile", "alpha_long_name": {"b": 2, "a": 1}, "mid": "x"}
    fact = remember(ada, text=None, category="note", value=value)
    [stored] = facts_of(ada)
    assert list(stored.value) != list(value)  # jsonb's own order
    assert [r.label for r in stored.value_rows] == [
        "",
        "zeta",
        "alpha_long_name.b",
        "alpha_long_name.a",
        "mid",
    ]
    assert fact.value_rows[0].text == "Profile"


def test_a_json_fact_is_found_by_its_leaves_and_keys(api, ada, no_embeddings):
    post(api, facts_url(ada), {"category": "note", "value": {"pet": {"species": "tortoise"}}})
    post(api, facts_url(ada), {"category": "note", "value": {"drink": "tea"}})
    found = api.get(f"/api/v1/memory/subjects/{ada.user_id}/search", {"q": "tortoise"}).json()
    assert [r["text"] for r in found["results"]] == ["pet.species: tortoise"]
    found = api.get(f"/api/v1/memory/subjects/{ada.user_id}/search", {"q": "drink"}).json()
    assert [r["text"] for r in found["results"]] == ["drink: tea"]


def test_an_export_carries_the_value(api, ada):
    value = {"seat": {"side": "window", "row": [12, 14]}}
    post(api, facts_url(ada), {"category": "preference", "value": value})
    exported = api.get(f"/api/v1/memory/subjects/{ada.user_id}/export").json()
    assert [f["value"] for f in exported["facts"]] == [value]


def test_a_text_fact_is_answered_with_a_null_value_as_before(api, ada):
    created = post(api, facts_url(ada), {"category": "preference", "text": "Likes tea"})
    assert created.status_code == 201
    assert created.json()["value"] is None and created.json()["text"] == "Likes tea"


@pytest.mark.parametrize(
    "value",
    [
        {"payment": {"cards": [{"number": "4111 1111 1111 1111"}]}},
        {"card": 4111111111111111},  # a number, too
        {"login": {"password": "hunter2!x"}},  # the key says what the leaf is
        {"keys": ["sk_live_abcdefghijklmnop1234"]},
        {"AKIAABCDEFGHIJKLMNOP": "a key as a key"},
        {"deep": [[[[{"ssn": "123-45-6789"}]]]]},
    ],
)
def test_a_secret_anywhere_inside_a_value_is_refused_and_nothing_is_stored(api, ada, value):
    refused = post(api, facts_url(ada), {"category": "note", "value": value})
    assert refused.status_code == 422 and refused.json()["code"] == "secret_refused"
    assert "4111" not in refused.content.decode() and "hunter2" not in refused.content.decode()
    assert facts_of(ada) == []


def nested(depth: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"v": value}
    return value


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        ({"value": ["a", "list"]}, 400, "invalid_value"),
        ({"value": "a string"}, 400, "invalid_value"),
        ({"value": 3}, 400, "invalid_value"),
        ({"value": {"a": 1}, "text": "and a text"}, 400, "text_and_value"),
        ({"value": nested(values.MAX_VALUE_DEPTH + 1)}, 400, "too_deep"),
        ({"value": {"big": "x" * (values.MAX_VALUE_BYTES + 1)}}, 413, "value_too_large"),
        ({"value": {"a": 1}, "ttl_minutes": 0}, 400, "invalid_ttl"),
        ({"value": {"a": 1}, "ttl_minutes": -5}, 400, "invalid_ttl"),
        ({"value": {"a": 1}, "ttl_minutes": 1e12}, 400, "invalid_ttl"),
        ({"value": {"a": 1}, "ttl_minutes": "soon"}, 400, "invalid"),
        ({"value": None}, 400, "invalid"),
        ({}, 400, "invalid"),
    ],
)
def test_bad_values_get_a_code_and_change_nothing(api, ada, data, status, code):
    response = post(api, facts_url(ada), {"category": "note", **data})
    assert (response.status_code, response.json()["code"]) == (status, code)
    assert facts_of(ada) == []


def test_a_value_too_large_says_the_limit(api, ada):
    response = post(api, facts_url(ada), {"category": "note", "value": {"b": "x" * 20000}})
    assert response.status_code == 413
    assert "16,384 bytes" in response.json()["message"]
    assert response.json()["detail"]["limit"] == values.MAX_VALUE_BYTES


def test_a_nul_character_inside_a_value_is_a_400(api, ada):
    body = '{"category": "note", "value": {"a": {"b": "x\\u0000y"}}}'
    response = api.post(facts_url(ada), body, content_type="application/json")
    assert response.status_code == 400
    assert facts_of(ada) == []


def test_the_same_value_again_refreshes_and_another_value_for_the_key_supersedes(api, ada):
    first = post(api, facts_url(ada), {"category": "note", "key": "k", "value": {"a": 1, "b": 2}})
    again = post(api, facts_url(ada), {"category": "note", "key": "k", "value": {"b": 2, "a": 1}})
    assert again.status_code == 200 and again.json()["merged_into"] == first.json()["id"]
    # The same derived text ("a: 1"), another value: a new version, never a merge.
    changed = post(api, facts_url(ada), {"category": "note", "key": "k", "value": {"a": "1"}})
    assert changed.status_code == 201 and changed.json()["value"] == {"a": "1"}
    assert [f.value for f in facts_of(ada, live_only=True)] == [{"a": "1"}]


def test_values_are_never_merged_as_near_duplicates(api, ada):
    post(api, facts_url(ada), {"category": "note", "value": {"a": 1}})
    other = post(api, facts_url(ada), {"category": "note", "value": {"a": "1"}})
    assert other.status_code == 201
    text = post(api, facts_url(ada), {"category": "note", "text": "a: 1"})
    assert text.status_code == 201
    assert len(facts_of(ada)) == 3


def test_a_batch_takes_values_and_ttls_as_the_single_post_does(api, ada):
    items = [
        {"category": "note", "key": "a", "value": {"x": [1, 2]}, "ttl_minutes": 30},
        {"category": "note", "key": "a", "value": {"x": [1, 2]}},
        {"category": "note", "value": {"card": "4111 1111 1111 1111"}},
        {"category": "note", "value": [1]},
    ]
    response = post(api, f"{facts_url(ada)}:batch", {"facts": items})
    statuses = [r["status"] for r in response.json()["results"]]
    assert statuses == [201, 200, 422, 400]
    [fact] = facts_of(ada)
    assert fact.value == {"x": [1, 2]}
    assert fact.ttl_minutes is None and fact.expires_at is None  # the second write's: none


# --- the privacy page -----------------------------------------------------------------------------


def test_the_privacy_page_shows_a_value_as_lines_not_json(client_for, ada):
    remember(
        ada,
        text=None,
        category="note",
        value={
            "text": "Travel profile",
            "seat": {"side": "window"},
            "<i>odd</i>": "<script>alert(1)</script>",
        },
    )
    page = client_for("member").get("/memory/").content.decode()
    assert '<dl class="fact-value">' in page
    assert "<dt>seat.side</dt><dd>window</dd>" in page
    assert "Travel profile" in page
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page
    assert "{&quot;" not in page and '{"seat"' not in page  # no raw JSON


def test_a_long_value_is_folded_on_the_privacy_page(client_for, ada):
    value = {f"field{i}": f"value {i}" for i in range(12)} | {"essay": "word " * 100}
    remember(ada, text=None, category="note", value=value)
    page = client_for("member").get("/memory/").content.decode()
    assert "5 more lines" in page  # 13 lines: 8 shown, 5 folded
    assert '<details class="fact-leaf">' in page and "…" in page


def test_correcting_a_value_on_the_privacy_page_makes_it_the_text_written(client_for, ada):
    fact = remember(ada, text=None, category="note", value={"drink": "tea"})
    response = client_for("member").post(
        f"/memory/facts/{fact.pk}/edit/", {"text": "Drinks coffee now"}
    )
    assert response.status_code in (200, 302)
    live = facts_of(ada, live_only=True)
    assert [(f.text, f.value) for f in live] == [("Drinks coffee now", None)]


def test_a_value_fact_is_deleted_completely(client_for, ada):
    fact = remember(ada, text=None, category="note", value={"drink": "tea"})
    client_for("member").post(f"/memory/facts/{fact.pk}/delete/")
    assert facts_of(ada) == []
