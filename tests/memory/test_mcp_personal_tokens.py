"""A person's own MCP token at /mcp: it reaches their memories only, nobody else's, and
nothing but the MCP server; revoked, expired or held by someone no longer a member, it is
refused. And `memory_update`, and refusals in words with stable codes, for both kinds of
token. Through the SDK's own client, over real HTTP to the real ASGI app (as test_mcp.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from memory.facts import services as memory_services
from tenants import personal_tokens
from tenants import services as tenant_services
from tenants.models import ApiKey, AuditEvent, Membership, Role
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import facts_of, remember
from tests.memory.test_mcp import SECRET, assert_401, call, post_tools_list, text_of
from tests.windows import clear_of_a_window_edge

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process


@pytest.fixture
def alice(tenant_a):
    return factories.make_member(tenant_a, Role.MEMBER)


@pytest.fixture
def bob(tenant_a):
    return factories.make_member(tenant_a, Role.MEMBER)


@pytest.fixture
def token(alice) -> str:
    return factories.make_personal_token(alice).raw


def audit(tenant, **filters) -> list[AuditEvent]:
    with tenant_scope(tenant.pk):
        return list(AuditEvent.objects.for_tenant(tenant).filter(**filters).order_by("id"))


# --- what a personal token reaches ------------------------------------------------------------


def test_a_personal_token_reads_and_writes_its_owners_memories_without_naming_them(
    console_url, alice, bob, token
):
    remember(bob, "Bob lives in Lyon", category="profile")
    added, listed, found = call(
        console_url,
        token,
        ("memory_add", {"text": "Prefers window seats", "category": "preference"}),
        ("memory_list", {}),
        ("memory_search", {"query": "window seat"}),
    )
    assert not added.is_error, text_of(added)
    assert added.structured_content["subject"] == alice.user.username
    fact_id = added.structured_content["fact"]["id"]
    assert [f.text for f in facts_of(alice)] == ["Prefers window seats"]
    assert [f["id"] for f in listed.structured_content["facts"]] == [fact_id]
    assert [h["id"] for h in found.structured_content["facts"]] == [fact_id]
    assert "Lyon" not in text_of(listed) + text_of(found)
    assert [f.text for f in facts_of(bob)] == ["Bob lives in Lyon"]


def test_a_personal_token_naming_its_owner_is_answered(console_url, alice, token):
    remember(alice, "Likes tea", category="preference")
    (listed,) = call(console_url, token, ("memory_list", {"subject": alice.user.username}))
    assert [f["text"] for f in listed.structured_content["facts"]] == ["Likes tea"]


def test_a_personal_token_never_reaches_another_person(console_url, alice, bob, token):
    bobs = remember(bob, "Bob lives in Lyon", category="profile")
    who = bob.user.username
    named = call(
        console_url,
        token,
        ("memory_list", {"subject": who}),
        ("memory_search", {"subject": who, "query": "Lyon"}),
        ("memory_add", {"subject": who, "text": "Planted", "category": "note"}),
        ("memory_update", {"subject": who, "fact_id": str(bobs.pk), "text": "Moved"}),
        ("memory_delete", {"subject": who, "fact_id": str(bobs.pk)}),
    )
    for result in named:
        assert result.is_error
        assert result.structured_content == {
            "code": "subject_not_allowed",
            "message": (
                f"This token reaches only the memories of {alice.user.username}, its owner:"
                " leave out `subject`."
            ),
        }
        assert "Lyon" not in text_of(result)
    # Another person's fact by its id, without naming them: not among the owner's facts.
    by_id = call(
        console_url,
        token,
        ("memory_update", {"fact_id": str(bobs.pk), "text": "Moved to Paris"}),
        ("memory_delete", {"fact_id": str(bobs.pk)}),
    )
    for result in by_id:
        assert result.structured_content["code"] == "not_found"
    assert [(f.text, f.valid_until) for f in facts_of(bob)] == [("Bob lives in Lyon", None)]
    assert facts_of(alice) == []


def test_an_admins_personal_token_reaches_only_the_admin_even_with_support_access(
    console_url, tenant_a, bob
):
    admin = factories.make_member(tenant_a, Role.ADMIN)
    with tenant_scope(tenant_a.pk):
        memory_services.support_access_set(actor=factories.principal_for(admin), enabled=True)
    remember(bob, "Bob lives in Lyon", category="profile")
    raw = factories.make_personal_token(admin).raw
    (result,) = call(console_url, raw, ("memory_list", {"subject": bob.user.username}))
    assert result.structured_content["code"] == "subject_not_allowed"


def test_a_read_only_personal_token_reads_but_cannot_change(console_url, alice):
    raw = factories.make_personal_token(alice, write=False).raw
    fact = remember(alice, "Likes tea", category="preference")
    listed, added, deleted = call(
        console_url,
        raw,
        ("memory_list", {}),
        ("memory_add", {"text": "Likes coffee", "category": "preference"}),
        ("memory_delete", {"fact_id": str(fact.pk)}),
    )
    assert not listed.is_error
    for result in (added, deleted):
        assert result.structured_content == {
            "code": "permission_denied",
            "message": (
                "This token can read your memories but not change them (it was made read-only;"
                " make one that may change them on your privacy page)."
            ),
            "detail": ["write"],
        }
    assert [f.text for f in facts_of(alice)] == ["Likes tea"]


def test_a_personal_token_is_refused_by_the_rest_api(tenant_a, alice, token):
    fact = remember(alice, "Likes tea", category="preference")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    urls = [
        f"/api/v1/memory/subjects?username={alice.user.username}",
        f"/api/v1/memory/subjects/{alice.user_id}/facts",
        f"/api/v1/memory/facts/{fact.pk}",
        "/api/v1/runs",
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 401, url
        assert response.json()["code"] == "unauthenticated"
        assert "personal MCP token" in response.json()["message"]
    response = client.post(
        f"/api/v1/memory/subjects/{alice.user_id}/facts",
        {"category": "note", "text": "Planted"},
        content_type="application/json",
    )
    assert response.status_code == 401
    # The same secret under the integrations' prefix is no key either (the hash covers it).
    disguised = Client(HTTP_AUTHORIZATION="Bearer ak" + token.removeprefix("mcp"))
    assert disguised.get(f"/api/v1/memory/subjects/{alice.user_id}/facts").status_code == 401
    assert [f.text for f in facts_of(alice)] == ["Likes tea"]


def test_personal_tokens_are_not_on_the_admins_api_key_list(tenant_a, alice, token):
    admin = factories.make_member(tenant_a, Role.ADMIN)
    key = factories.make_api_key(tenant_a, ["admin"])
    response = Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}").get("/api/v1/api-keys")
    assert response.status_code == 200
    assert [k["id"] for k in response.json()] == [str(key.key.pk)]
    client = Client()
    client.force_login(admin.user)
    assert token.split("_", 2)[2][:8] not in client.get("/admin/api-keys/").content.decode()


# --- refused tokens ----------------------------------------------------------------------------


def _revoke(alice, key: ApiKey) -> None:
    with tenant_scope(alice.tenant_id):
        personal_tokens.token_revoke(actor=factories.principal_for(alice), key=key)


def _expire(alice, key: ApiKey) -> None:
    with tenant_scope(alice.tenant_id):
        ApiKey.objects.for_tenant(alice.tenant_id).filter(pk=key.pk).update(
            expires_at=timezone.now() - dt.timedelta(seconds=1)
        )


def _remove(alice, key: ApiKey) -> None:
    admin = factories.make_member(alice.tenant, Role.ADMIN)
    with tenant_scope(alice.tenant_id):
        tenant_services.membership_remove(actor=factories.principal_for(admin), membership=alice)


def _drop_membership(alice, key: ApiKey) -> None:
    """The membership gone some other way than the members page (the Django admin, a script)."""
    with tenant_scope(alice.tenant_id):
        Membership.objects.for_tenant(alice.tenant_id).filter(pk=alice.pk).delete()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_revoke, "This token was revoked; make a new one on your privacy page."),
        (_expire, "This token has expired; make a new one on your privacy page."),
        (_remove, "This token was revoked; make a new one on your privacy page."),
        (_drop_membership, "The person this token belongs to is no longer a member here."),
    ],
)
def test_a_revoked_expired_or_former_members_token_is_401_saying_why(
    console_url, alice, change, reason
):
    created = factories.make_personal_token(alice)
    (before,) = call(console_url, created.raw, ("memory_list", {}))
    assert not before.is_error
    change(alice, created.key)
    response = post_tools_list(console_url, f"Bearer {created.raw}")
    assert_401(response)
    assert response.json()["error_description"] == reason
    assert response.json()["code"] == "unauthenticated"


@pytest.mark.parametrize(
    "token",
    [
        "mcp_",
        "mcp_nonsense",
        f"mcp_{'g' * 32}_secret",
        f"mcp_{'0' * 32}_secret",
        f"mcp_{'0' * 32}_{'x' * 5000}",
        "ak_" + "0" * 32,
    ],
)
def test_a_malformed_or_unknown_token_is_401_never_a_crash(console_url, token):
    response = post_tools_list(console_url, f"Bearer {token}")
    assert_401(response)
    assert response.json()["error_description"]


def test_a_former_members_tokens_stay_dead_when_they_join_again(console_url, tenant_a, alice):
    created = factories.make_personal_token(alice)
    _remove(alice, created.key)
    factories.make_member(tenant_a, Role.MEMBER, user=alice.user)
    response = post_tools_list(console_url, f"Bearer {created.raw}")
    assert_401(response)
    assert response.json()["error_description"].startswith("This token was revoked")
    (removed,) = audit(tenant_a, action="membership.removed")
    assert removed.after == {"personal_tokens_revoked": 1}


# --- audit and rate limits -----------------------------------------------------------------------


def test_every_write_with_a_personal_token_is_audited_against_the_token(
    console_url, tenant_a, alice
):
    created = factories.make_personal_token(alice)
    added, updated = call(
        console_url,
        created.raw,
        ("memory_add", {"text": "Lives in Lyon", "category": "profile"}),
        ("memory_list", {}),
    )
    fact_id = added.structured_content["fact"]["id"]
    updated, deleted = call(
        console_url,
        created.raw,
        ("memory_update", {"fact_id": fact_id, "text": "Lives in Paris"}),
        ("memory_delete", {"fact_id": fact_id}),
    )
    assert not updated.is_error and not deleted.is_error, text_of(updated) + text_of(deleted)
    new_id = updated.structured_content["fact"]["id"]
    used = audit(tenant_a, action="personal_token.used", target_id=str(created.key.pk))
    assert [e.after for e in used] == [
        {"tool": "memory_add", "fact_id": fact_id},
        {"tool": "memory_update", "fact_id": new_id},
        {"tool": "memory_delete", "fact_id": fact_id},
    ]
    assert {e.actor_user_id for e in used} == {alice.user_id}
    label = f"{alice.user.username} (MCP token {created.key.prefix}…)"
    assert {e.actor_label for e in used} == {label}
    assert [e.action for e in audit(tenant_a, actor_label=label)] == [
        "personal_token.used",
        "memory.fact_updated",
        "personal_token.used",
        "memory.fact_deleted",
        "personal_token.used",
    ]
    # Its reads of its owner's own memories are not audited; nothing holds the fact's text.
    events = audit(tenant_a)
    assert not [e for e in events if e.action == "memory.read_by_api_key"]
    assert "Lyon" not in str([(e.before, e.after) for e in events])


def test_rate_limits_count_each_token_on_its_own(console_url, tenant_a, alice):
    clear_of_a_window_edge()
    tenant_services.tenant_set_rate_limits(slug=tenant_a.slug, limits={"write": "1/min"})
    first = factories.make_personal_token(alice).raw
    second = factories.make_personal_token(alice).raw
    add = ("memory_add", {"text": "Likes tea", "category": "preference"})
    again = ("memory_add", {"text": "Likes green tea a lot", "category": "preference"})
    ok, limited = call(console_url, first, add, again)
    assert not ok.is_error
    assert limited.structured_content["code"] == "rate_limited"
    assert "for this token" in limited.structured_content["message"]
    (other,) = call(console_url, second, again)
    assert not other.is_error, text_of(other)


# --- memory_update ------------------------------------------------------------------------------


def test_memory_update_supersedes_the_fact_and_keeps_its_history(console_url, tenant_a, alice):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    old = remember(alice, "Lives in Lyon", category="profile", key="home.city")
    (updated,) = call(
        console_url,
        key,
        (
            "memory_update",
            {"subject": alice.user.username, "fact_id": str(old.pk), "text": "Lives in Paris"},
        ),
    )
    assert not updated.is_error, text_of(updated)
    new = updated.structured_content["fact"]
    assert updated.structured_content["replaced"] == str(old.pk)
    assert new["text"] == "Lives in Paris" and new["key"] == "home.city" and new["source"] == "api"
    versions = facts_of(alice)
    assert [(f.text, f.valid_until is None) for f in versions] == [
        ("Lives in Lyon", False),
        ("Lives in Paris", True),
    ]
    assert versions[0].superseded_by_id == versions[1].pk
    assert versions[0].lineage == versions[1].lineage
    assert "replaces" in text_of(updated) and "Lives in Paris" in text_of(updated)
    (event,) = audit(tenant_a, action="memory.fact_updated")
    assert event.target_id == new["id"]
    assert event.after == {"replaces": str(old.pk), "via": "mcp"}

    same, stale = call(
        console_url,
        key,
        (
            "memory_update",
            {"subject": alice.user.username, "fact_id": new["id"], "text": "lives in paris."},
        ),
        (
            "memory_update",
            {"subject": alice.user.username, "fact_id": str(old.pk), "text": "Lives in Rome"},
        ),
    )
    assert same.structured_content["replaced"] is None
    assert same.structured_content["fact"]["id"] == new["id"]
    assert stale.structured_content["code"] == "fact_superseded"
    assert len(facts_of(alice)) == 2


def test_memory_update_refuses_secrets_and_closed_categories(console_url, tenant_a, alice, token):
    admin = factories.make_member(tenant_a, Role.ADMIN)
    with tenant_scope(tenant_a.pk):
        memory_services.policy_set(
            actor=factories.principal_for(admin), category="health", agents_may_write=False
        )
    fact = remember(alice, "Likes tea", category="preference")
    health = remember(alice, "Has asthma", category="health")
    secret, closed = call(
        console_url,
        token,
        ("memory_update", {"fact_id": str(fact.pk), "text": SECRET}),
        ("memory_update", {"fact_id": str(health.pk), "text": "Has no asthma"}),
    )
    assert secret.structured_content["code"] == "secret_refused"
    assert "hunter2" not in text_of(secret)
    assert closed.structured_content["code"] == "category_not_writable"
    assert sorted(f.text for f in facts_of(alice)) == ["Has asthma", "Likes tea"]


# --- refusals in words --------------------------------------------------------------------------


def test_bad_arguments_are_tool_errors_with_codes_never_crashes(console_url, alice, token):
    fact = remember(alice, "Likes tea", category="preference")
    results = call(
        console_url,
        token,
        ("memory_update", {"fact_id": "not-a-uuid", "text": "x"}),
        ("memory_delete", {"fact_id": "0" * 100}),
        ("memory_search", {"query": "tea", "limit": 0}),
        ("memory_update", {"fact_id": str(fact.pk)}),
        ("memory_add", {"text": "Likes tea", "category": "no-such-category"}),
        ("memory_add", {"text": "", "category": "note"}),
        ("memory_fly", {}),
    )
    codes = [r.structured_content["code"] for r in results]
    assert codes == [
        "not_found",
        "not_found",
        "invalid_arguments",
        "invalid_arguments",
        "unknown_category",
        "empty_text",
        "unknown_tool",
    ]
    assert all(r.is_error for r in results)
    assert results[2].structured_content["message"] == (
        "The arguments of memory_search are not valid:"
        " `limit`: input should be greater than or equal to 1."
    )
    assert results[3].structured_content["message"] == (
        "The arguments of memory_update are not valid: `text` is required."
    )
    assert results[3].structured_content["detail"] == {"fields": ["text"]}
    assert "memory_update" in results[6].structured_content["message"]
    for result in results:
        assert "Error executing tool" not in text_of(result)
        assert "Traceback" not in text_of(result)


def test_an_api_key_must_name_the_person(console_url, tenant_a):
    key = factories.make_api_key(tenant_a, ["read", "write"]).raw
    (result,) = call(console_url, key, ("memory_list", {}))
    assert result.structured_content == {
        "code": "subject_required",
        "message": (
            "Name the person with `subject` (their username): an API key acts for every"
            " member of its tenant."
        ),
    }


@pytest.mark.parametrize(
    ("scopes", "tool", "message"),
    [
        (["write"], "memory_list", "This API key cannot read memories (it lacks the read scope)."),
        (
            ["approve"],
            "memory_add",
            "This API key cannot change memories (it lacks the write scope).",
        ),
    ],
)
def test_a_key_without_the_scope_is_told_which_in_words(
    console_url, tenant_a, alice, scopes, tool, message
):
    key = factories.make_api_key(tenant_a, scopes).raw
    args = {"subject": alice.user.username}
    if tool == "memory_add":
        args |= {"text": "Likes tea", "category": "note"}
    (result,) = call(console_url, key, (tool, args))
    assert result.structured_content["message"] == message
    assert "Scope." not in text_of(result)


def test_a_crashing_tool_is_a_coded_error_that_tells_nothing_of_the_crash(caplog):
    from memory.mcp.server import INTERNAL, build_server

    server = build_server()

    def boom() -> str:
        raise RuntimeError("internals: /srv/secret.py line 3")

    server.add_tool(boom)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        result = pool.submit(asyncio.run, server.call_tool("boom", {})).result()
    assert result.is_error
    assert result.structured_content == {"code": "internal_error", "message": INTERNAL}
    assert "internals" not in text_of(result)
    assert "MCP tool 'boom' crashed" in caplog.text  # the crash stays in the server's log


def test_the_tools_list_offers_memory_update_and_subject_is_optional(console_url, token):
    response = post_tools_list(console_url, f"Bearer {token}")
    tools = {t["name"]: t["inputSchema"] for t in response.json()["result"]["tools"]}
    assert sorted(tools) == [
        "memory_add",
        "memory_delete",
        "memory_list",
        "memory_search",
        "memory_update",
    ]
    assert sorted(tools["memory_update"]["required"]) == ["fact_id", "text"]
    assert "subject" not in tools["memory_list"].get("required", [])
    assert all("subject" in schema["properties"] for schema in tools.values())
