"""The privacy page and its actions, the memory settings page (the one-time link has
test_privacy_links.py).

Roles: admin, manager, member, viewer of tenant A; the outsider is an admin of tenant B.
"""

from __future__ import annotations

import json
import re

import pytest

from memory.models import MemoryFact
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import HX, facts_of, remember

pytestmark = pytest.mark.django_db
WHO = ["admin", "manager", "member", "viewer", "outsider"]


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


@pytest.fixture
def ada_fact(members):
    """A fact about the member."""
    return remember(members["member"], "Prefers to be contacted by email", key="contact.channel")


def grant_support(members, on: bool = True) -> None:
    from memory.facts.services import support_access_set

    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        support_access_set(actor=admin, enabled=on)


# --- the role matrix ------------------------------------------------------------------------------

OWN_PAGE = {"admin": 200, "manager": 200, "member": 200, "viewer": 200, "outsider": 200}
SETTINGS = {"admin": 200, "manager": 403, "member": 403, "viewer": 403, "outsider": 200}
# Someone else's fact: only its subject may act on it; everyone else gets 404, never 403.
ACT_ON_ADAS_FACT = {"admin": 404, "manager": 404, "member": 302, "viewer": 404, "outsider": 404}
SUPPORT_VIEW_OFF = {"admin": 404, "manager": 404, "member": 200, "viewer": 404, "outsider": 404}
SUPPORT_VIEW_ON = {"admin": 200, "manager": 200, "member": 200, "viewer": 404, "outsider": 404}


@pytest.mark.parametrize("who", WHO)
def test_everyone_has_a_privacy_page_about_themselves_only(client_for, ada_fact, who):
    response = client_for(who).get("/memory/")
    assert response.status_code == OWN_PAGE[who]
    assert ("Prefers to be contacted by email" in text(response)) == (who == "member")


@pytest.mark.parametrize("who", WHO)
def test_the_settings_page_is_for_admins_of_their_own_tenant(client_for, who):
    assert client_for(who).get("/memory/settings/").status_code == SETTINGS[who]


@pytest.mark.parametrize("who", WHO)
@pytest.mark.parametrize("action", ["edit", "delete"])
def test_only_the_subject_can_edit_or_delete_a_fact(client_for, members, ada_fact, who, action):
    response = client_for(who).post(
        f"/memory/facts/{ada_fact.pk}/{action}/", {"text": "Prefers to be contacted by phone"}
    )
    assert response.status_code == ACT_ON_ADAS_FACT[who]
    assert (len(facts_of(members["member"], live_only=True)) == 1) == (
        who != "member" or action == "edit"
    )


@pytest.mark.parametrize("who", WHO)
def test_staff_see_a_members_memories_only_with_support_access(client_for, members, ada_fact, who):
    subject = members["member"].user_id
    assert client_for(who).get(f"/memory/?subject={subject}").status_code == SUPPORT_VIEW_OFF[who]
    grant_support(members)
    response = client_for(who).get(f"/memory/?subject={subject}")
    assert response.status_code == SUPPORT_VIEW_ON[who]


def test_every_support_view_is_audited_and_read_only(client_for, members, ada_fact):
    grant_support(members)
    page = client_for("manager").get(f"/memory/?subject={members['member'].user_id}")
    assert "Prefers to be contacted by email" in text(page)
    assert "Delete</button>" not in text(page) and "through support access" in text(page)
    with tenant_scope(members["admin"].tenant_id):
        viewed = AuditEvent.objects.for_tenant(members["admin"].tenant_id).filter(
            action="memory.support_viewed", target_id=str(members["member"].user_id)
        )
        assert viewed.count() == 1


def test_anonymous_visitors_are_sent_to_log_in(client_for):
    response = client_for("anonymous").get("/memory/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


# --- the page -------------------------------------------------------------------------------------


def test_the_page_groups_facts_and_shows_provenance_expiry_and_history(client_for, members):
    ada = members["member"]
    remember(ada, "Prefers to be contacted by phone", key="contact.channel")
    remember(ada, "Prefers to be contacted by email", key="contact.channel")
    remember(ada, "Works as a nurse", category="profile")
    page = text(client_for("member").get("/memory/"))
    assert page.index("Preferences") < page.index("About you")
    assert "Entered by you on" in page and "Kept until you delete it" in page
    assert (
        "History: 1 earlier version" in page
        and "<del>Prefers to be contacted by phone</del>" in page
    )


def test_editing_a_fact_with_htmx_answers_the_new_version_and_keeps_history(
    client_for, members, ada_fact
):
    response = client_for("member").post(
        f"/memory/facts/{ada_fact.pk}/edit/", {"text": "Prefers to be contacted by SMS"}, **HX
    )
    assert response.status_code == 200
    assert "Prefers to be contacted by SMS" in text(response) and "History: 1" in text(response)
    assert json.loads(response["HX-Trigger"])["memory-changed"]["message"] == "Fact updated."
    assert [f.text for f in facts_of(members["member"], live_only=True)] == [
        "Prefers to be contacted by SMS"
    ]


@pytest.mark.parametrize(
    "bad,status", [("", 400), ("x" * 1001, 400), ("my password is hunter22", 422)]
)
def test_a_bad_edit_is_refused_and_changes_nothing(client_for, members, ada_fact, bad, status):
    response = client_for("member").post(f"/memory/facts/{ada_fact.pk}/edit/", {"text": bad}, **HX)
    assert response.status_code == status and 'role="alert"' in response.content.decode()
    assert [f.text for f in facts_of(members["member"])] == ["Prefers to be contacted by email"]


def test_editing_a_superseded_fact_is_a_conflict(client_for, members, ada_fact):
    remember(members["member"], "Prefers to be contacted by phone", key="contact.channel")
    response = client_for("member").post(
        f"/memory/facts/{ada_fact.pk}/edit/", {"text": "Prefers pigeons"}, **HX
    )
    assert response.status_code == 409
    assert "Prefers pigeons" not in [f.text for f in facts_of(members["member"])]


def test_deleting_a_fact_with_htmx_removes_it_everywhere(client_for, members, ada_fact):
    client = client_for("member")
    response = client.post(f"/memory/facts/{ada_fact.pk}/delete/", **HX)
    assert response.status_code == 200 and "Nothing remembered" in text(response)
    assert facts_of(members["member"]) == []
    assert "Prefers to be contacted" not in text(client.get("/memory/"))
    assert "Prefers to be contacted" not in client.get("/memory/export/").content.decode()


def test_delete_all_needs_the_confirmation_box(client_for, members, ada_fact):
    client = client_for("member")
    refused = client.post("/memory/delete-all/", {})
    assert refused.status_code == 400 and "Tick the box" in text(refused)
    assert len(facts_of(members["member"])) == 1
    assert client.post("/memory/delete-all/", {"confirm": "on"}).status_code == 302
    assert facts_of(members["member"]) == []


def test_export_holds_facts_with_history_and_my_transcripts_only(client_for, members):
    from agents.runtime.models import AgentSession, Message

    ada = members["member"]
    remember(ada, "Prefers phone", key="contact.channel")
    remember(ada, "Prefers email", key="contact.channel")
    remember(members["viewer"], "Someone else's fact")
    with tenant_scope(ada.tenant_id):
        session = AgentSession.objects.create(tenant_id=ada.tenant_id, user=ada.user, agent="x")
        Message.objects.create(
            tenant_id=ada.tenant_id, session=session, seq=1, role="user", content="hello desk"
        )
    response = client_for("member").get("/memory/export/")
    assert response["Content-Disposition"].startswith("attachment")
    data = json.loads(response.content)
    assert [f["text"] for f in data["facts"]] == ["Prefers email"]
    assert data["facts"][0]["history"][0]["text"] == "Prefers phone"
    assert data["sessions"][0]["messages"][0]["content"] == "hello desk"
    assert "Someone else" not in response.content.decode()


def test_the_page_says_when_retrieval_is_full_text_only(client_for, no_embeddings):
    assert "No embedding model is configured" in text(client_for("member").get("/memory/"))


def test_admins_set_support_access_and_category_policies(client_for, members):
    client = client_for("admin")
    assert (
        client.post("/memory/settings/", {"support": "1", "support_access": "on"}).status_code
        == 302
    )
    saved = client.post(
        "/memory/settings/",
        {"category": "diet", "label": "Diet", "ttl_days": "30", "max_facts_per_subject": "5"},
    )
    assert saved.status_code == 302
    page = text(client.get("/memory/settings/"))
    assert "Diet <code>diet</code>" in page and "30 days" in page and "checked" in page
    bad = client.post("/memory/settings/", {"category": "Bad Name", "max_facts_per_subject": "0"})
    assert bad.status_code == 400


def test_facts_rows_vanish_from_the_table_on_delete(members, ada_fact):
    with tenant_scope(ada_fact.tenant_id):
        MemoryFact.objects.for_tenant(ada_fact.tenant_id).filter(pk=ada_fact.pk).delete()
    assert facts_of(members["member"]) == []
