"""Setting up a tenant without a browser: `tenant_admin_create` and `api_key_create`."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from tenants.models import ApiKey, AuditEvent, Membership, Role, Tenant
from tenants.scope import system_scope, tenant_scope
from tests import factories

PASSWORD = "a long deploy passphrase 42"


def admin_create(*args: str) -> str:
    out = io.StringIO()
    call_command("tenant_admin_create", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def key_create(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("api_key_create", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def tenant_named(slug: str) -> Tenant | None:
    with system_scope("test_setup_commands"):
        return Tenant.objects.filter(slug=slug).first()


def audit_actions(tenant: Tenant) -> list[str]:
    with tenant_scope(tenant.pk):
        return list(
            AuditEvent.objects.for_tenant(tenant).order_by("id").values_list("action", flat=True)
        )


def counts() -> tuple[int, int]:
    with system_scope("test_setup_commands"):
        return Tenant.objects.count(), get_user_model().objects.count()


ADA = ["--tenant", "initech", "--username", "ada", "--email", "ada@initech.example"]


# --- tenant_admin_create ----------------------------------------------------------------------


def test_creating_a_tenant_admin_makes_the_tenant_the_user_and_an_admin_membership(db):
    out = admin_create(*ADA, "--tenant-name", "Initech Inc")
    tenant = tenant_named("initech")
    assert tenant is not None and tenant.name == "Initech Inc"
    user = get_user_model().objects.get(username="ada")
    assert user.email == "ada@initech.example"
    with tenant_scope(tenant.pk):
        assert Membership.objects.for_tenant(tenant).get(user=user).role == Role.ADMIN
    assert "Created tenant initech" in out and "Made ada an admin of initech" in out
    assert audit_actions(tenant) == ["tenant.created", "user.created", "membership.added"]


def test_creating_a_tenant_admin_twice_changes_nothing(db):
    admin_create(*ADA)
    tenant = tenant_named("initech")
    before = (counts(), audit_actions(tenant))
    out = admin_create(*ADA)
    assert "Nothing changed" in out
    assert (counts(), audit_actions(tenant)) == before


def test_without_a_password_the_user_cannot_sign_in_and_is_told_how_to_set_one(db):
    out = admin_create(*ADA)
    assert not get_user_model().objects.get(username="ada").has_usable_password()
    assert "manage.py changepassword ada" in out


def test_a_password_from_the_environment_is_set_and_never_printed(db, monkeypatch):
    monkeypatch.setenv("ADA_PASSWORD", PASSWORD)
    out = admin_create(*ADA, "--password-from-env", "ADA_PASSWORD")
    assert PASSWORD not in out
    assert get_user_model().objects.get(username="ada").check_password(PASSWORD)
    tenant = tenant_named("initech")
    with tenant_scope(tenant.pk):
        events = list(AuditEvent.objects.for_tenant(tenant).values_list("after", flat=True))
    assert PASSWORD not in str(events)


def test_an_existing_user_becomes_admin_of_a_new_tenant_and_keeps_their_password(db, monkeypatch):
    user = factories.make_user("ada")
    monkeypatch.setenv("ADA_PASSWORD", PASSWORD)
    out = admin_create(*ADA, "--password-from-env", "ADA_PASSWORD")
    assert "password was not changed" in out
    assert get_user_model().objects.get(username="ada").check_password(factories.PASSWORD)
    tenant = tenant_named("initech")
    with tenant_scope(tenant.pk):
        assert Membership.objects.for_tenant(tenant).get(user=user).role == Role.ADMIN


def test_an_existing_tenant_gets_its_admin_and_keeps_its_name(tenant_a):
    out = admin_create(
        "--tenant", tenant_a.slug, "--tenant-name", "Other", "--username", "ada", "--email",
        "ada@acme.example",
    )  # fmt: skip
    assert tenant_named(tenant_a.slug).name == tenant_a.name
    assert "name kept" in out
    assert audit_actions(tenant_a)[-2:] == ["user.created", "membership.added"]


def test_someone_with_another_role_is_not_promoted(tenant_a):
    viewer = factories.make_member(tenant_a, Role.VIEWER)
    with pytest.raises(CommandError, match="already in acme-test as viewer"):
        admin_create(
            "--tenant", tenant_a.slug, "--username", viewer.user.username, "--email", "v@x.example"
        )
    with tenant_scope(tenant_a.pk):
        assert Membership.objects.for_tenant(tenant_a).get(user=viewer.user).role == Role.VIEWER


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "not a slug!"], "not a valid tenant slug"),
        (["--tenant", "x" * 64], "at most 63"),
        (["--username", "no spaces please"], "not a valid username"),
        (["--email", "nope"], "not a valid email"),
        (["--password-from-env", "UNSET_FOR_THIS_TEST"], "UNSET_FOR_THIS_TEST is not set"),
    ],
)
def test_bad_input_is_refused_with_a_message_and_changes_nothing(db, args, message):
    given = dict(zip(ADA[::2], ADA[1::2], strict=True))
    given.update(dict(zip(args[::2], args[1::2], strict=True)))
    before = counts()
    with pytest.raises(CommandError, match=message):
        admin_create(*[part for pair in given.items() for part in pair])
    assert counts() == before


def test_a_weak_password_is_refused_and_changes_nothing(db, monkeypatch):
    monkeypatch.setenv("ADA_PASSWORD", "123")
    before = counts()
    with pytest.raises(CommandError, match="ADA_PASSWORD: ") as raised:
        admin_create(*ADA, "--password-from-env", "ADA_PASSWORD")
    assert "123" not in str(raised.value)
    assert counts() == before


# --- api_key_create ---------------------------------------------------------------------------


def test_a_key_is_printed_alone_on_stdout_once_and_works_with_the_api(tenant_a):
    out, err = key_create("--tenant", tenant_a.slug, "--name", "deploy", "--scope", "read")
    raw = out.strip()
    assert out == raw + "\n" and raw.startswith(f"ak_{tenant_a.pk.hex}_")
    assert raw not in err and "shown only this once" in err
    response = Client(HTTP_AUTHORIZATION=f"Bearer {raw}").get("/api/v1/me")
    assert response.status_code == 200, response.content
    assert response.json()["scopes"] == ["read"]


@pytest.mark.parametrize(
    ("level", "scopes"),
    [
        ("read", ["read"]),
        ("write", ["read", "write"]),
        ("admin", ["admin", "approve", "read", "write"]),
    ],
)
def test_each_scope_level_includes_the_ones_below_it(tenant_a, level, scopes):
    key_create("--tenant", tenant_a.slug, "--name", "deploy", "--scope", level)
    with tenant_scope(tenant_a.pk):
        assert ApiKey.objects.for_tenant(tenant_a).get().scopes == scopes


def test_a_created_key_is_audited_as_the_command_with_its_expiry(tenant_a):
    key_create(
        "--tenant", tenant_a.slug, "--name", "ci", "--scope", "write", "--expires-in-days", "30"
    )
    with tenant_scope(tenant_a.pk):
        key = ApiKey.objects.for_tenant(tenant_a).get()
        event = AuditEvent.objects.for_tenant(tenant_a).get(action="api_key.created")
    assert key.expires_at is not None and key.created_by is None
    assert event.actor_label == "manage.py api_key_create"
    assert event.target_id == str(key.pk)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "nope"], "No tenant 'nope'"),
        (["--scope", "everything"], "--scope is one of read, write, admin"),
        (["--name", "   "], "--name needs"),
        (["--expires-in-days", "0"], "expires in 1 to 3650 days"),
    ],
)
def test_a_bad_key_request_is_refused_with_a_message_and_creates_no_key(tenant_a, args, message):
    given = {"--tenant": tenant_a.slug, "--name": "deploy", "--scope": "read"}
    given.update(dict(zip(args[::2], args[1::2], strict=True)))
    with pytest.raises(CommandError, match=message):
        key_create(*[part for pair in given.items() for part in pair])
    with tenant_scope(tenant_a.pk):
        assert not ApiKey.objects.for_tenant(tenant_a).exists()
