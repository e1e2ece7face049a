"""The memory API: facts CRUD, search, export, delete-all, privacy links; bad input; roles."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests import factories
from tests.memory.conftest import facts_of, remember

pytestmark = pytest.mark.django_db
WHO = ["admin", "manager", "member", "viewer", "outsider"]


def post(client, url, data=None, method="post"):
    return getattr(client, method)(url, json.dumps(data or {}), content_type="application/json")


@pytest.fixture
def api(tenant_a):
    key = factories.make_api_key(tenant_a, ["read", "write"])
    return Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")


@pytest.fixture
def ada(members):
    return members["member"]


# --- role matrix ----------------------------------------------------------------------------------

# The member's own facts: a person acts only for themselves (staff read with support access).
READ_MEMBERS_FACTS = {"admin": 404, "manager": 404, "member": 200, "viewer": 404, "outsider": 404}
WRITE_MEMBERS_FACTS = {"admin": 404, "manager": 404, "member": 201, "viewer": 403, "outsider": 404}


@pytest.mark.parametrize("who", WHO)
def test_reading_a_members_facts_is_for_that_member(client_for, ada, who):
    remember(ada, "Likes tea")
    response = client_for(who).get(f"/api/v1/memory/subjects/{ada.user_id}/facts")
    assert response.status_code == READ_MEMBERS_FACTS[who]


@pytest.mark.parametrize("who", WHO)
def test_writing_a_members_facts_is_for_that_member(client_for, ada, who):
    data = {"category": "preference", "text": "Likes tea"}
    response = post(client_for(who), f"/api/v1/memory/subjects/{ada.user_id}/facts", data)
    assert response.status_code == WRITE_MEMBERS_FACTS[who]
    assert len(facts_of(ada)) == (1 if who == "member" else 0)


@pytest.mark.parametrize("who", WHO)
def test_a_fact_by_id_is_404_to_everyone_but_its_subject(client_for, ada, who):
    fact = remember(ada, "Likes tea")
    response = client_for(who).get(f"/api/v1/memory/facts/{fact.pk}")
    assert response.status_code == (200 if who == "member" else 404)


def test_an_api_key_acts_for_any_member_of_its_tenant_but_not_beyond(api, ada, outsider):
    created = post(
        api,
        f"/api/v1/memory/subjects/{ada.user_id}/facts",
        {"category": "preference", "text": "Likes tea", "key": "drink"},
    )
    assert created.status_code == 201 and created.json()["source"]["kind"] == "api"
    fact_id = created.json()["id"]
    assert api.get(f"/api/v1/memory/facts/{fact_id}").status_code == 200
    assert api.get(f"/api/v1/memory/subjects/{outsider.user_id}/facts").status_code == 404
    stranger = remember(outsider, "Likes coffee")
    assert api.get(f"/api/v1/memory/facts/{stranger.pk}").status_code == 404
    assert api.delete(f"/api/v1/memory/facts/{stranger.pk}").status_code == 404
    assert len(facts_of(outsider)) == 1


# --- behaviour ------------------------------------------------------------------------------------


def test_patch_makes_a_new_version_and_patching_the_old_one_is_a_conflict(api, ada):
    fact = remember(ada, "Lives in Lyon")
    new = post(api, f"/api/v1/memory/facts/{fact.pk}", {"text": "Lives in Paris"}, "patch")
    assert new.status_code == 200 and new.json()["text"] == "Lives in Paris"
    again = post(api, f"/api/v1/memory/facts/{fact.pk}", {"text": "Lives in Nice"}, "patch")
    assert again.status_code == 409 and again.json()["code"] == "fact_superseded"


@pytest.mark.parametrize(
    "data,status,code",
    [
        ({"category": "preference", "text": ""}, 400, "empty_text"),
        ({"category": "preference", "text": "x" * 1001}, 400, "text_too_long"),
        ({"category": "gossip", "text": "hello"}, 400, "unknown_category"),
        ({"category": "preference"}, 400, "invalid"),
        ({"category": "preference", "text": "card 4111-1111-1111-1111"}, 422, "secret_refused"),
    ],
)
def test_bad_input_gets_a_code_and_changes_nothing(api, ada, data, status, code):
    response = post(api, f"/api/v1/memory/subjects/{ada.user_id}/facts", data)
    assert response.status_code == status and response.json()["code"] == code
    assert facts_of(ada) == []


def test_search_ranks_the_subjects_facts_and_says_how(api, ada, no_embeddings):
    remember(ada, "Prefers to be contacted by email")
    remember(ada, "Owns a standing desk")
    response = api.get(f"/api/v1/memory/subjects/{ada.user_id}/search", {"q": "contact email"})
    body = response.json()
    assert body["mode"] == "text"
    assert [r["text"] for r in body["results"]] == ["Prefers to be contacted by email"]
    assert api.get(f"/api/v1/memory/subjects/{ada.user_id}/search").status_code == 400


def test_export_and_delete_all_through_the_api(api, ada):
    remember(ada, "Likes tea")
    export = api.get(f"/api/v1/memory/subjects/{ada.user_id}/export").json()
    assert [f["text"] for f in export["facts"]] == ["Likes tea"]
    deleted = post(api, f"/api/v1/memory/subjects/{ada.user_id}/delete-all")
    assert deleted.json() == {"deleted": 1} and facts_of(ada) == []
    assert api.get(f"/api/v1/memory/subjects/{ada.user_id}/export").json()["facts"] == []


def test_an_integrations_admin_key_gets_a_one_time_privacy_link_for_an_end_user_only(
    api, ada, members, tenant_a
):
    assert post(api, f"/api/v1/memory/subjects/{ada.user_id}/privacy-link").status_code == 403
    key = factories.make_api_key(tenant_a, ["admin"])
    admin_api = Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")
    made = post(admin_api, f"/api/v1/memory/subjects/{ada.user_id}/privacy-link")
    assert made.status_code == 201 and made.json()["url"].startswith("/memory/link/")
    admin = members["admin"].user_id
    assert post(admin_api, f"/api/v1/memory/subjects/{admin}/privacy-link").status_code == 404


def test_a_deleted_fact_cannot_come_back_through_the_api_search_export_or_pages(
    api, ada, client_for, no_embeddings
):
    fact = remember(ada, "Prefers to be contacted by carrier pigeon")
    assert api.delete(f"/api/v1/memory/facts/{fact.pk}").status_code == 204
    base = f"/api/v1/memory/subjects/{ada.user_id}"
    assert api.get(f"/api/v1/memory/facts/{fact.pk}").status_code == 404
    assert api.get(f"{base}/facts").json()["results"] == []
    assert api.get(f"{base}/search", {"q": "carrier pigeon"}).json()["results"] == []
    assert "pigeon" not in api.get(f"{base}/export").content.decode()
    member = client_for("member")
    for url in ("/memory/", "/memory/export/"):
        assert "pigeon" not in member.get(url).content.decode()
