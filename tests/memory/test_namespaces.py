"""`GET /api/v1/memory/namespaces`: the LangGraph store's namespaces that a tenant's live facts
form, filtered and paged as LangGraph's stores do, scoped to the key's tenant."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from memory.models import MemoryFact
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import remember

pytestmark = pytest.mark.django_db
URL = "/api/v1/memory/namespaces"
WHO = ["admin", "manager", "member", "viewer", "outsider"]


def key_client(tenant, scopes) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {factories.make_api_key(tenant, scopes).raw}")


@pytest.fixture
def people(tenant_a, members):
    ada = factories.make_member(tenant_a, user=factories.make_user("ada"))
    bob = factories.make_member(tenant_a, user=factories.make_user("bob"))
    remember(ada, "Likes tea", category="preference")
    remember(ada, "Lives in Lyon", category="profile")
    remember(bob, "Likes coffee", category="preference")
    return {"ada": ada, "bob": bob}


def listed(client, **params) -> list[tuple[str, ...]]:
    response = client.get(URL, params)
    assert response.status_code == 200, response.content
    return [tuple(ns) for ns in response.json()["namespaces"]]


@pytest.fixture
def api(tenant_a):
    return key_client(tenant_a, ["read"])


def test_every_member_and_category_with_a_fact_is_a_namespace_sorted(api, people):
    assert listed(api) == [
        ("memories", "ada", "preference"),
        ("memories", "ada", "profile"),
        ("memories", "bob", "preference"),
    ]


def test_prefix_suffix_wildcards_and_max_depth_filter_as_langgraph_does(api, people):
    assert listed(api, prefix=["memories", "ada"]) == [
        ("memories", "ada", "preference"),
        ("memories", "ada", "profile"),
    ]
    assert listed(api, suffix=["preference"]) == [
        ("memories", "ada", "preference"),
        ("memories", "bob", "preference"),
    ]
    assert listed(api, prefix=["memories", "*", "profile"]) == [("memories", "ada", "profile")]
    assert listed(api, suffix=["bob", "*"]) == [("memories", "bob", "preference")]
    assert listed(api, max_depth=2) == [("memories", "ada"), ("memories", "bob")]
    assert listed(api, max_depth=1) == [("memories",)]
    assert listed(api, prefix=["users"]) == []
    assert listed(api, prefix=["memories", "nobody"]) == []
    assert listed(api, prefix=["memories", "ada", "profile", "deeper"]) == []


def test_limit_and_offset_page_the_sorted_list(api, people):
    assert listed(api, limit=2) == [
        ("memories", "ada", "preference"),
        ("memories", "ada", "profile"),
    ]
    assert listed(api, limit=2, offset=2) == [("memories", "bob", "preference")]
    assert listed(api, offset=10) == []


def test_superseded_expired_and_former_members_facts_form_no_namespace(api, people, tenant_a):
    ada = people["ada"]
    with tenant_scope(tenant_a.pk):
        MemoryFact.objects.filter(subject_id=ada.user_id, category="profile").update(
            expires_at=timezone.now() - dt.timedelta(minutes=1)
        )
        people["bob"].delete()  # left the tenant; his facts await the sweep
    assert listed(api) == [("memories", "ada", "preference")]


@pytest.mark.parametrize("scopes", [["read"], ["read", "write"], ["read", "write", "admin"]])
def test_keys_that_may_read_list_their_tenant(tenant_a, people, scopes):
    assert len(listed(key_client(tenant_a, scopes))) == 3


@pytest.mark.parametrize("scopes", [["write"], ["approve"], ["admin"]])
def test_a_key_without_read_is_refused(tenant_a, people, scopes):
    response = key_client(tenant_a, scopes).get(URL)
    assert response.status_code == 403


def test_another_tenants_key_sees_nothing_of_this_one(tenant_b, people):
    other = key_client(tenant_b, ["read", "write", "admin"])
    assert listed(other) == []
    assert listed(other, prefix=["memories", "ada"]) == []


@pytest.mark.parametrize("who", WHO)
def test_a_signed_in_person_lists_only_their_own(client_for, members, people, who):
    remember(members["member"], "Likes jazz", category="preference")
    mine = listed(client_for(who))
    assert mine == (
        [("memories", members["member"].user.username, "preference")] if who == "member" else []
    )


def test_a_key_listing_is_audited(api, people, tenant_a, django_capture_on_commit_callbacks):
    from tenants.models import AuditEvent

    with django_capture_on_commit_callbacks(execute=True):  # written once the read commits
        listed(api)
    with tenant_scope(tenant_a.pk):
        assert AuditEvent.objects.filter(action="memory.namespaces_listed_by_api_key").exists()


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 1001},
        {"limit": "ten"},
        {"offset": -1},
        {"max_depth": 0},
        {"max_depth": "x"},
        {"prefix": ["x" * 151]},
        {"prefix": ["a"] * 11},
    ],
)
def test_bad_parameters_are_a_400_never_a_500(api, people, params):
    response = api.get(URL, params)
    assert response.status_code == 400 and response.json()["code"] == "invalid"
