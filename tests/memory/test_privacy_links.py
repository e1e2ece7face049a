"""The one-time privacy link: who may make one, how it is opened, and what its session reaches.

A link is made by an integration with an `admin` key, shown as a confirmation page on GET
(a mail scanner's GET spends nothing) and redeemed by one POST. The session it opens reaches
the person's privacy page and nothing else: other pages, the API and the live socket treat it
as logged out, until the person logs in with their password.
"""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from agents.live.access import principal_for
from memory.models import PrivacyLinkUse
from memory.privacy import links
from tenants.models import AuditEvent, Membership, Role
from tenants.scope import tenant_scope
from tests import factories
from tests.live.conftest import Socket, run_async
from tests.memory.conftest import facts_of, remember, uses_model

pytestmark = pytest.mark.django_db


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def key_client(tenant, scopes: list[str]) -> Client:
    key = factories.make_api_key(tenant, scopes)
    return Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")


def mint(client: Client, subject_id: int):
    return client.post(
        f"/api/v1/memory/subjects/{subject_id}/privacy-link", "{}", content_type="application/json"
    )


def link_for(membership) -> str:
    with tenant_scope(membership.tenant_id):
        url, _ = links.link_make(tenant_id=membership.tenant_id, subject_id=membership.user_id)
    return url


def uses_of(membership) -> int:
    with tenant_scope(membership.tenant_id):
        return PrivacyLinkUse.objects.for_tenant(membership.tenant_id).count()


def audit(tenant_id, action: str) -> list[AuditEvent]:
    with tenant_scope(tenant_id):
        return list(AuditEvent.objects.for_tenant(tenant_id).filter(action=action).order_by("id"))


@pytest.fixture
def ada(members):
    """An end user of tenant A with one remembered fact."""
    remember(members["member"], "Prefers to be contacted by email", key="contact.channel")
    return members["member"]


@pytest.fixture
def redeemed(ada) -> Client:
    """A browser that opened ada's link and pressed the button."""
    client = Client()
    response = client.post(link_for(ada))
    assert response.status_code == 302 and response["Location"] == "/memory/"
    return client


# --- who may make a link --------------------------------------------------------------------------


def test_a_write_only_key_may_not_make_a_privacy_link(tenant_a, ada):
    response = mint(key_client(tenant_a, ["read", "write"]), ada.user_id)
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    assert audit(tenant_a.pk, "memory.privacy_link_made") == []


def test_an_admin_key_makes_a_link_for_an_end_user_only(tenant_a, ada, members, outsider):
    admin_key = key_client(tenant_a, ["admin"])
    made = mint(admin_key, ada.user_id)
    assert made.status_code == 201 and made.json()["url"].startswith("/memory/link/")
    assert mint(admin_key, members["admin"].user_id).status_code == 404  # staff: never
    assert mint(admin_key, outsider.user_id).status_code == 404  # another tenant's person
    [event] = audit(tenant_a.pk, "memory.privacy_link_made")
    assert event.target_id == str(ada.user_id)


def test_a_person_cannot_make_a_link_even_an_admin(client_for, ada):
    assert mint(client_for("admin"), ada.user_id).status_code == 404


# --- opening and redeeming ------------------------------------------------------------------------


def test_opening_a_link_twice_shows_a_confirmation_and_leaves_it_valid(ada):
    url, client = link_for(ada), Client()
    for _ in range(2):
        page = client.get(url)
        assert page.status_code == 200
        assert ada.user.username in text(page) and ada.tenant.name in text(page)
        assert re.search(r'<form method="post"[^>]*>.*Open my privacy page', text(page))
    assert "_auth_user_id" not in client.session  # nobody is logged in by a GET
    assert uses_of(ada) == 0 and audit(ada.tenant_id, "memory.privacy_link_redeemed") == []
    assert Client().post(url).status_code == 302  # still good for the person


def test_the_confirmation_page_is_not_cached_or_indexed(ada):
    page = Client().get(link_for(ada))
    assert "no-store" in page["Cache-Control"]
    assert page["Referrer-Policy"] == "same-origin"  # the token must not leak to other sites


def test_posting_the_link_opens_the_privacy_page_once(ada):
    url, client = link_for(ada), Client()
    opened = client.post(url, follow=True)
    assert opened.status_code == 200 and "Prefers to be contacted by email" in text(opened)
    again = Client().post(url)
    assert again.status_code == 410 and "already used" in text(again)
    assert Client().get(url).status_code == 410  # and the confirmation says so too
    assert uses_of(ada) == 1


def test_redeeming_needs_the_forms_csrf_token(ada):
    url, client = link_for(ada), Client(enforce_csrf_checks=True)
    assert client.post(url).status_code == 403  # a cross-site form cannot spend it
    assert uses_of(ada) == 0
    client.get(url)
    token = client.cookies["csrftoken"].value
    assert client.post(url, {"csrfmiddlewaretoken": token}).status_code == 302


def test_a_bad_or_expired_link_gets_a_clear_page_not_a_login_loop(ada, settings):
    url = link_for(ada)
    settings.MEMORY_PRIVACY_LINK_MAX_AGE_SECONDS = -1
    for method in ("get", "post"):
        response = getattr(Client(), method)(url)
        assert response.status_code == 410 and "expired" in text(response)
        assert getattr(Client(), method)("/memory/link/garbage/").status_code == 410


def test_a_person_removed_from_the_tenant_after_the_link_was_made_cannot_redeem_it(ada):
    url = link_for(ada)
    with tenant_scope(ada.tenant_id):
        Membership.objects.for_tenant(ada.tenant_id).filter(pk=ada.pk).delete()
    assert Client().get(url).status_code == 410
    response = Client().post(url)
    assert response.status_code == 410 and "no longer valid" in text(response)
    assert uses_of(ada) == 0 and audit(ada.tenant_id, "memory.privacy_link_redeemed") == []


def test_a_person_promoted_to_staff_after_the_link_was_made_cannot_redeem_it(ada):
    url = link_for(ada)
    with tenant_scope(ada.tenant_id):
        Membership.objects.for_tenant(ada.tenant_id).filter(pk=ada.pk).update(role=Role.MANAGER)
    assert Client().post(url).status_code == 410


def test_a_person_who_joined_another_tenant_after_the_link_was_made_cannot_redeem_it(ada, tenant_b):
    url = link_for(ada)
    factories.make_member(tenant_b, Role.MEMBER, user=ada.user)
    assert Client().post(url).status_code == 410


def test_redeeming_is_audited_with_the_person_as_actor(ada):
    Client().post(link_for(ada))
    [event] = audit(ada.tenant_id, "memory.privacy_link_redeemed")
    assert event.actor_user_id == ada.user_id
    assert (event.target_type, event.target_id) == ("auth.user", str(ada.user_id))


# --- what the link's session reaches --------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/runs/",
        "/conversations/",
        "/approvals/",
        "/console/",
        "/admin/",
        "/memory/settings/",
        "/password/",
    ],
)
def test_the_links_session_is_sent_to_log_in_anywhere_but_the_privacy_page(redeemed, path):
    response = redeemed.get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


@pytest.mark.parametrize(
    "path", ["/api/v1/me", "/api/v1/runs", "/api/v1/sessions", "/api/v1/memory/subjects/{}/facts"]
)
def test_the_links_session_is_not_logged_in_for_the_api(redeemed, ada, path):
    response = redeemed.get(path.format(ada.user_id))
    assert response.status_code == 401 and response.json()["code"] == "unauthenticated"


@pytest.mark.django_db(transaction=True)  # the socket reads the session from another thread
def test_the_links_session_cannot_open_the_live_socket(redeemed, ada):
    key = redeemed.cookies["sessionid"].value
    assert principal_for(ada.user, key) is None
    cookie = f"sessionid={key}; csrftoken=testtoken"

    async def scenario():
        async with Socket(cookie) as ws:
            assert await ws.closed_with() in (4401, 4403)

    run_async(scenario)


def test_the_links_session_sees_edits_exports_and_deletes_the_persons_memories(redeemed, ada):
    page = redeemed.get("/memory/")
    assert page.status_code == 200 and "Prefers to be contacted by email" in text(page)
    exported = redeemed.get("/memory/export/")
    assert exported.status_code == 200
    assert [f["text"] for f in json.loads(exported.content)["facts"]] == [
        "Prefers to be contacted by email"
    ]
    [fact] = facts_of(ada, live_only=True)
    edited = redeemed.post(f"/memory/facts/{fact.pk}/edit/", {"text": "Prefers phone calls"})
    assert edited.status_code == 302
    [fact] = facts_of(ada, live_only=True)
    assert fact.text == "Prefers phone calls"
    assert redeemed.post(f"/memory/facts/{fact.pk}/delete/").status_code == 302
    assert facts_of(ada) == []
    remember(ada, "Lives in Lyon")
    assert redeemed.post("/memory/delete-all/", {"confirm": "on"}).status_code == 302
    assert facts_of(ada) == []


def test_the_links_session_shows_no_way_to_the_rest_of_the_console(redeemed):
    page = text(redeemed.get("/memory/"))
    assert 'href="/runs/"' not in page and 'href="/approvals/"' not in page
    assert "Log out" in page


def test_the_links_session_logs_out(redeemed):
    assert redeemed.post("/logout/").status_code == 302
    assert redeemed.get("/memory/").status_code == 302


def test_a_normal_login_afterwards_reaches_the_whole_console_again(redeemed, ada):
    assert redeemed.get("/login/").status_code == 200  # the form, not "already logged in"
    login = redeemed.post(
        "/login/", {"username": ada.user.username, "password": factories.PASSWORD}
    )
    assert login.status_code == 302
    assert redeemed.get("/runs/").status_code == 200
    assert redeemed.get("/api/v1/me").status_code == 200
    assert principal_for(ada.user, redeemed.cookies["sessionid"].value) is not None


def test_a_link_opened_in_a_logged_in_browser_restricts_that_session(ada):
    client = Client()
    client.force_login(ada.user)
    assert client.get("/runs/").status_code == 200
    client.post(link_for(ada))
    assert client.get("/runs/").status_code == 302


# --- API-key reads are audited --------------------------------------------------------------------


@uses_model
@pytest.mark.slow
def test_an_api_keys_reads_of_a_persons_memories_are_audited_once_per_request(
    tenant_a, ada, django_capture_on_commit_callbacks
):
    api = key_client(tenant_a, ["read"])
    [fact] = facts_of(ada, live_only=True)
    base = f"/api/v1/memory/subjects/{ada.user_id}"
    with django_capture_on_commit_callbacks(execute=True):  # written once each read commits
        assert api.get(f"{base}/facts").status_code == 200
        assert api.get(f"{base}/search", {"q": "email"}).status_code == 200
        assert api.get(f"/api/v1/memory/facts/{fact.pk}").status_code == 200
    reads = audit(tenant_a.pk, "memory.read_by_api_key")
    assert len(reads) == 3
    assert {(e.target_type, e.target_id) for e in reads} == {("auth.user", str(ada.user_id))}
    assert all(e.actor_user_id is None and e.actor_label.startswith("api key") for e in reads)
    with django_capture_on_commit_callbacks(execute=True):
        assert api.get(f"{base}/export").status_code == 200
    [exported] = audit(tenant_a.pk, "memory.exported")
    assert exported.target_id == str(ada.user_id)


def test_a_refused_api_read_records_nothing(tenant_a, outsider):
    api = key_client(tenant_a, ["read"])
    assert api.get(f"/api/v1/memory/subjects/{outsider.user_id}/facts").status_code == 404
    assert audit(tenant_a.pk, "memory.read_by_api_key") == []


def test_a_person_reading_their_own_memories_is_not_audited(client_for, ada):
    member = client_for("member")
    assert member.get(f"/api/v1/memory/subjects/{ada.user_id}/facts").status_code == 200
    assert member.get(f"/api/v1/memory/subjects/{ada.user_id}/export").status_code == 200
    assert audit(ada.tenant_id, "memory.read_by_api_key") == []
    assert audit(ada.tenant_id, "memory.exported") == []
