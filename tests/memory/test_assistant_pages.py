"""The privacy page's "Connect your assistant" section: a person makes a token for their own
memories (shown once, stored as a hash), sees it listed, revokes it; every step audited.

Roles: admin, manager, member, viewer of tenant A; the outsider is an admin of tenant B.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from django.test import Client

from tenants import personal_tokens
from tenants.models import ApiKey, AuditEvent
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import HX
from tests.memory.test_privacy_links import link_for

pytestmark = pytest.mark.django_db
WHO = ["admin", "manager", "member", "viewer", "outsider"]
CREATE = "/memory/assistant/tokens/"
FORM = {"name": "Laptop Claude", "access": "write", "expires": "90"}
RAW = re.compile(r"mcp_[0-9a-f]{32}_[A-Za-z0-9_-]{43}")


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def revoke_url(key: ApiKey) -> str:
    return f"/memory/assistant/tokens/{key.pk}/revoke/"


def tokens_of(membership) -> list[ApiKey]:
    with tenant_scope(membership.tenant_id):
        return list(ApiKey.objects.for_tenant(membership.tenant_id).filter(user=membership.user))


def audit(tenant_id, action: str) -> list[AuditEvent]:
    with tenant_scope(tenant_id):
        return list(AuditEvent.objects.for_tenant(tenant_id).filter(action=action))


# --- the role matrix ------------------------------------------------------------------------------


@pytest.mark.parametrize("who", WHO)
def test_everyone_makes_a_token_for_their_own_memories_whatever_their_role(
    client_for, members, outsider, who
):
    membership = outsider if who == "outsider" else members[who]
    response = client_for(who).post(CREATE, FORM)
    assert response.status_code == 201
    (key,) = tokens_of(membership)
    assert key.user_id == membership.user_id and key.tenant_id == membership.tenant_id
    assert key.scopes == ["read", "write"] and key.name == "Laptop Claude"
    (raw,) = set(RAW.findall(text(response)))
    assert key.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw.split("_")[1] == membership.tenant_id.hex
    assert "no-store" in response["Cache-Control"]


def test_anonymous_visitors_are_sent_to_log_in(client_for, members):
    key = factories.make_personal_token(members["member"]).key
    for url in (CREATE, revoke_url(key)):
        response = client_for("anonymous").post(url, FORM)
        assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert len(tokens_of(members["member"])) == 1 and tokens_of(members["member"])[0].is_active


# Someone else's token: only its person may revoke it; everyone else gets 404, never 403.
REVOKE_MEMBERS_TOKEN = {"admin": 404, "manager": 404, "member": 302, "viewer": 404, "outsider": 404}


@pytest.mark.parametrize("who", WHO)
def test_only_its_person_revokes_a_token(client_for, members, who):
    key = factories.make_personal_token(members["member"]).key
    response = client_for(who).post(revoke_url(key))
    assert response.status_code == REVOKE_MEMBERS_TOKEN[who]
    (after,) = tokens_of(members["member"])
    assert after.is_active == (who != "member")


def test_another_tenants_token_id_is_404(client_for, outsider):
    key = factories.make_personal_token(outsider).key
    assert client_for("admin").post(revoke_url(key)).status_code == 404
    assert tokens_of(outsider)[0].is_active


def test_the_section_is_on_everyones_own_page_and_not_on_a_support_view(client_for, members):
    factories.make_personal_token(members["member"])
    for who in WHO:
        page = text(client_for(who).get("/memory/"))
        assert "Connect your assistant" in page
        assert ("my assistant" in page) == (who == "member")  # one's own tokens only


# --- shown once, listed, revoked ------------------------------------------------------------------


def test_the_token_is_shown_once_with_a_config_to_paste(client_for, members, settings):
    settings.AGENTSTATE_CONSOLE_URL = "https://agents.example.com/"
    client = client_for("member")
    created = text(client.post(CREATE, FORM))
    (raw,) = set(RAW.findall(created))
    config = re.search(r'<pre[^>]*id="assistant-config"[^>]*>(.*?)</pre>', created).group(1)
    assert json.loads(config.replace("&quot;", '"')) == {
        "mcpServers": {
            "agentstate-memory": {
                "type": "http",
                "url": "https://agents.example.com/mcp",
                "headers": {"Authorization": f"Bearer {raw}"},
            }
        }
    }
    assert "claude mcp add --transport http agentstate-memory https://agents.example.com/mcp" in (
        created
    )
    later = text(client.get("/memory/"))
    assert raw not in later and not RAW.search(later)
    key = tokens_of(members["member"])[0]
    assert key.prefix in later and "Laptop Claude" in later and "Never used" in later
    assert "Reads and changes your memories" in later and "Bearer &lt;your token&gt;" in later


def test_a_read_only_token_that_expires_is_made_as_asked(client_for, members):
    form = {"name": "Phone", "access": "read", "expires": "30"}
    assert client_for("member").post(CREATE, form).status_code == 201
    (key,) = tokens_of(members["member"])
    assert key.scopes == ["read"]
    assert 29 <= (key.expires_at - key.created_at).days <= 30
    form["expires"] = ""
    client_for("member").post(CREATE, form)
    assert {k.expires_at for k in tokens_of(members["member"])} - {key.expires_at} == {None}


def test_with_htmx_the_section_alone_comes_back_and_says_what_happened(client_for, members):
    client = client_for("member")
    response = client.post(CREATE, FORM, **HX)
    assert response.status_code == 201
    body = response.content.decode()
    assert body.lstrip().startswith('<section class="card assistant" id="assistant"')
    assert "What we remember about you" not in body
    message = json.loads(response["HX-Trigger"])["memory-changed"]["message"]
    assert message == "Token created: copy it now, it is shown once."
    key = tokens_of(members["member"])[0]
    revoked = client.post(revoke_url(key), **HX)
    assert revoked.status_code == 200
    assert json.loads(revoked["HX-Trigger"])["memory-changed"]["message"] == (
        "Token “Laptop Claude” revoked."
    )
    assert "Revoked" in text(revoked) and "Revoke the token" not in text(revoked)


def test_making_and_revoking_are_audited_without_the_secret(client_for, members, tenant_a):
    client = client_for("member")
    (raw,) = set(RAW.findall(text(client.post(CREATE, FORM))))
    key = tokens_of(members["member"])[0]
    assert client.post(revoke_url(key)).status_code == 302
    (created,) = audit(tenant_a.pk, "personal_token.created")
    (revoked,) = audit(tenant_a.pk, "personal_token.revoked")
    for event in (created, revoked):
        assert event.target_id == str(key.pk) and event.actor_user_id == members["member"].user_id
        assert raw not in json.dumps([event.before, event.after])
    assert created.after["scopes"] == ["read", "write"] and created.after["prefix"] == key.prefix


def test_revoking_twice_is_a_conflict_that_changes_nothing(client_for, members, tenant_a):
    key = factories.make_personal_token(members["member"]).key
    client = client_for("member")
    assert client.post(revoke_url(key)).status_code == 302
    again = client.post(revoke_url(key), **HX)
    assert again.status_code == 409 and "This token is already revoked." in text(again)
    assert len(audit(tenant_a.pk, "personal_token.revoked")) == 1


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"name": "", "access": "read", "expires": "90"}, "Give the token a name."),
        ({"name": "x" * 101, "access": "read", "expires": "90"}, "at most 100 characters"),
        ({"name": "A", "access": "admin", "expires": "90"}, "Select a valid choice"),
        ({"name": "A", "expires": "90"}, "Choose what the assistant may do."),
        ({"name": "A", "access": "read", "expires": "7"}, "Choose when the token expires."),
        ({"name": "A\x00", "access": "read", "expires": "90"}, "which is not allowed"),
    ],
)
def test_a_bad_form_is_400_with_a_message_and_makes_nothing(client_for, members, form, message):
    for headers in ({}, HX):
        response = client_for("member").post(CREATE, form, **headers)
        assert response.status_code == 400
        assert message in text(response)
    assert tokens_of(members["member"]) == []


def test_a_bad_token_id_is_404_and_get_is_not_allowed(client_for, members):
    client = client_for("member")
    assert client.post("/memory/assistant/tokens/not-a-uuid/revoke/").status_code == 404
    assert client.post(f"/memory/assistant/tokens/{'0' * 32}/revoke/").status_code == 404
    assert client.get(CREATE).status_code == 405


def test_past_the_limit_of_active_tokens_a_new_one_is_refused(client_for, members):
    for _ in range(personal_tokens.MAX_ACTIVE):
        factories.make_personal_token(members["member"])
    response = client_for("member").post(CREATE, FORM)
    assert response.status_code == 409
    assert "20 active assistant tokens" in text(response)
    assert len(tokens_of(members["member"])) == personal_tokens.MAX_ACTIVE


def test_a_privacy_links_session_makes_no_token(members):
    ada = members["member"]
    client = Client()
    assert client.post(link_for(ada)).status_code == 302
    page = text(client.get("/memory/"))
    assert "Connect your assistant" in page and "Make the token" not in page
    response = client.post(CREATE, FORM)
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    assert tokens_of(ada) == []
