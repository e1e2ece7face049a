"""OpenID Connect sign-in, without a provider: the claim mapping, the accounts it makes and
links, the invitations it accepts, and the wiring that exists only when it is configured."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.test import Client
from django.urls import NoReverseMatch, Resolver404, resolve, reverse
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from tenants.auth import sso
from tenants.models import AuditEvent, Invitation, Membership, Role, SsoIdentity
from tenants.scope import tenant_scope
from tests import factories, processes

ISSUER = "https://id.example.com"


@pytest.fixture
def oidc(settings):
    """Settings as with single sign-on on (the URL conf stays as loaded: off)."""
    settings.OIDC_RP_CLIENT_ID = "agentstate"
    settings.OIDC_RP_CLIENT_SECRET = "secret"
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = ISSUER + "/authorize"
    settings.OIDC_OP_TOKEN_ENDPOINT = ISSUER + "/token"
    settings.OIDC_OP_USER_ENDPOINT = ISSUER + "/userinfo"
    settings.OIDC_OP_JWKS_ENDPOINT = ISSUER + "/jwks"
    settings.OIDC_OP_ISSUER = ISSUER
    settings.OIDC_TENANT_CLAIM = "agentstate_tenants"
    settings.OIDC_ROLE_CLAIM = "groups"
    settings.OIDC_ROLE_MAP = {"agents-admins": "admin", "agents-managers": "manager"}
    settings.OIDC_DEFAULT_ROLE = "viewer"
    return settings


def claims(sub: str = "abc-123", **extra):
    return {"sub": sub, "preferred_username": "dana", **extra}


# --- the claim mapping ----------------------------------------------------------------------------

MAP = {"agents-admins": "admin", "agents-managers": "manager", "staff": "member"}


@pytest.mark.parametrize(
    "given,expected",
    [
        ({"t": "acme", "g": ["agents-managers"]}, {"acme": "manager"}),
        ({"t": ["acme", "globex"], "g": "agents-admins"}, {"acme": "admin", "globex": "admin"}),
        # The strongest mapped role wins; unknown values are ignored.
        ({"t": "acme", "g": ["staff", "agents-admins", "x"]}, {"acme": "admin"}),
        ({"t": "acme", "g": ["nothing-mapped"]}, {"acme": "viewer"}),  # the default role
        ({"t": "acme"}, {"acme": "viewer"}),
        ({"g": ["agents-admins"]}, {}),  # no tenant named
        (
            {"t": {"acme": "agents-admins", "globex": ["staff"]}},
            {"acme": "admin", "globex": "member"},
        ),  # noqa: E501
        ({"t": 42, "g": "agents-admins"}, {}),
        ({"t": [None, {"x": 1}, "acme"], "g": [True, "staff"]}, {"acme": "member"}),
    ],
)
def test_claims_map_to_tenants_and_roles(given, expected):
    mapped = sso.grants_from_claims(
        given, tenant_claim="t", role_claim="g", role_map=MAP, default_role="viewer"
    )
    assert mapped == expected


def test_without_a_default_role_unmapped_claims_give_nothing():
    given = {"t": "acme", "g": ["nothing-mapped"]}
    assert sso.grants_from_claims(given, tenant_claim="t", role_claim="g", role_map=MAP) == {}


def test_without_a_role_map_the_role_claim_names_roles_itself():
    given = {"t": "acme", "role": ["manager", "superuser"]}
    assert sso.grants_from_claims(given, tenant_claim="t", role_claim="role") == {"acme": "manager"}


def test_without_a_tenant_claim_setting_claims_give_no_tenant():
    assert sso.grants_from_claims({"t": "acme"}, tenant_claim="", default_role="admin") == {}


def test_a_claim_path_with_dots_walks_into_objects():
    given = {"org": {"slug": "acme"}, "realm_access": {"roles": ["agents-managers"]}}
    mapped = sso.grants_from_claims(
        given, tenant_claim="org.slug", role_claim="realm_access.roles", role_map=MAP
    )
    assert mapped == {"acme": "manager"}


@pytest.mark.parametrize(
    "extra,expected",
    [
        ({"email": "Dana@Example.com", "email_verified": True}, "dana@example.com"),
        ({"email": "dana@example.com", "email_verified": False}, ""),
        ({"email": "dana@example.com", "email_verified": "true"}, ""),  # only a real true
        ({"email": "dana@example.com"}, ""),
        ({"email": ["x"], "email_verified": True}, ""),
    ],
)
def test_only_a_verified_email_is_trusted(extra, expected):
    assert sso.verified_email(claims(**extra)) == expected


# --- accounts and memberships ---------------------------------------------------------------------


def test_a_first_sign_in_creates_an_account_without_a_password_linked_to_the_subject(oidc, db):
    user = sso.sso_user_create(claims(email="dana@example.com", email_verified=True))
    assert user.username == "dana" and user.email == "dana@example.com"
    assert not user.has_usable_password()
    assert SsoIdentity.objects.get(user=user).subject == "abc-123"
    assert list(sso.users_for_claims(claims())) == [user]
    assert list(sso.users_for_claims(claims(sub="someone-else"))) == []


def test_sso_never_signs_in_as_an_existing_password_account_with_the_same_email_or_name(oidc, db):
    local = factories.make_user("dana")
    local.email = "dana@example.com"
    local.save()
    given = claims(email="dana@example.com", email_verified=True)
    assert list(sso.users_for_claims(given)) == []
    user = sso.sso_user_create(given)
    assert user.pk != local.pk and user.username == "dana2"
    local.refresh_from_db()
    assert local.check_password(factories.PASSWORD)


def test_an_unverified_email_is_not_stored_on_the_account(oidc, db):
    user = sso.sso_user_create(claims(email="ceo@example.com", email_verified=False))
    assert user.email == ""


def test_the_tenant_claim_adds_a_membership_once_and_never_changes_a_role(oidc, tenant_a):
    user = sso.sso_user_create(claims())
    given = claims(agentstate_tenants=["acme-test", "no-such-tenant"], groups=["agents-managers"])
    done = sso.sso_sign_in(user=user, claims=given)
    assert done.joined == ["acme-test"]
    with tenant_scope(tenant_a.pk):
        membership = Membership.objects.for_tenant(tenant_a).get(user=user)
        assert membership.role == Role.MANAGER
        Membership.objects.for_tenant(tenant_a).filter(pk=membership.pk).update(role="viewer")
        event = AuditEvent.objects.for_tenant(tenant_a).get(action="membership.added")
    assert event.actor_label == "sso" and event.after["via"] == "sso claims"
    again = sso.sso_sign_in(user=user, claims={**given, "groups": ["agents-admins"]})
    assert again.joined == []
    with tenant_scope(tenant_a.pk):
        assert Membership.objects.for_tenant(tenant_a).get(user=user).role == Role.VIEWER


def _invite(tenant, email: str, role: str = "manager", **fields) -> Invitation:
    with tenant_scope(tenant.pk):
        return Invitation.objects.create(
            tenant=tenant,
            email=email,
            role=role,
            token_hash=uuid.uuid4().hex,
            sent_at=timezone.now(),
            expires_at=fields.pop("expires_at", timezone.now() + timedelta(days=7)),
            **fields,
        )


def test_a_verified_email_accepts_its_open_invitations_in_every_tenant(oidc, tenant_a, tenant_b):
    _invite(tenant_a, "dana@example.com", "manager")
    _invite(tenant_b, "dana@example.com", "viewer")
    expired = _invite(tenant_b, "other@example.com", expires_at=timezone.now())
    user = sso.sso_user_create(claims(email="Dana@example.com", email_verified=True))
    done = sso.sso_sign_in(user=user, claims=claims(email="Dana@example.com", email_verified=True))
    assert sorted(a.membership.role for a in done.accepted) == ["manager", "viewer"]
    for tenant, role in ((tenant_a, "manager"), (tenant_b, "viewer")):
        with tenant_scope(tenant.pk):
            assert Membership.objects.for_tenant(tenant).get(user=user).role == role
            accepted = AuditEvent.objects.for_tenant(tenant).get(action="invitation.accepted")
            assert accepted.actor_user == user
    with tenant_scope(tenant_b.pk):
        assert Invitation.objects.for_tenant(tenant_b).get(pk=expired.pk).accepted_at is None


@pytest.mark.parametrize("verified", [False, None])
def test_an_unverified_email_accepts_no_invitation(oidc, tenant_a, verified):
    invitation = _invite(tenant_a, "dana@example.com")
    given = claims(email="dana@example.com", email_verified=verified)
    user = sso.sso_user_create(given)
    assert sso.sso_sign_in(user=user, claims=given).accepted == []
    with tenant_scope(tenant_a.pk):
        assert Invitation.objects.for_tenant(tenant_a).get(pk=invitation.pk).accepted_at is None
        assert not Membership.objects.for_tenant(tenant_a).filter(user=user).exists()


def test_a_revoked_invitation_is_not_accepted_by_sso(oidc, tenant_a):
    _invite(tenant_a, "dana@example.com", revoked_at=timezone.now())
    given = claims(email="dana@example.com", email_verified=True)
    user = sso.sso_user_create(given)
    assert sso.sso_sign_in(user=user, claims=given).accepted == []


# --- the backend (mozilla-django-oidc) ------------------------------------------------------------


@pytest.fixture
def userinfo(monkeypatch):
    """What the provider's userinfo endpoint answers (no HTTP)."""
    answer: dict = {}
    monkeypatch.setattr(OIDCAuthenticationBackend, "get_userinfo", lambda self, *args: dict(answer))
    return answer


def test_the_backend_creates_then_finds_the_same_account_by_subject(oidc, tenant_a, userinfo):
    from tenants.auth.oidc import TenantOIDCBackend

    backend = TenantOIDCBackend()
    userinfo.update(
        claims(email="dana@example.com", email_verified=True, agentstate_tenants="acme-test")
    )
    first = backend.get_or_create_user("access", "id", {"sub": "abc-123"})
    again = backend.get_or_create_user("access", "id", {"sub": "abc-123"})
    assert first.pk == again.pk and get_user_model().objects.filter(username="dana").count() == 1
    with tenant_scope(tenant_a.pk):
        assert Membership.objects.for_tenant(tenant_a).get(user=first).role == Role.VIEWER


def test_the_backend_refuses_userinfo_about_another_subject(oidc, db, userinfo):
    from tenants.auth.oidc import TenantOIDCBackend

    userinfo.update(claims(sub="mallory"))
    with pytest.raises(SuspiciousOperation, match="subject"):
        TenantOIDCBackend().get_or_create_user("access", "id", {"sub": "abc-123"})
    assert not get_user_model().objects.exists()


def test_the_backend_refuses_claims_without_a_subject(oidc, db):
    from tenants.auth.oidc import TenantOIDCBackend

    assert not TenantOIDCBackend().verify_claims({"email": "dana@example.com"})
    assert TenantOIDCBackend().verify_claims({"sub": "x"})


def test_a_password_login_never_reaches_the_oidc_backend(oidc, db):
    from tenants.auth.oidc import TenantOIDCBackend

    # Without the code and state of the provider's redirect it answers no one.
    assert TenantOIDCBackend().authenticate(None, username="x", password="y") is None


# --- wiring: nothing unless configured ------------------------------------------------------------


def test_without_oidc_settings_no_oidc_url_is_routed_and_no_backend_is_listed(db, settings):
    assert settings.OIDC_ENABLED is False
    assert "tenants.auth.oidc.TenantOIDCBackend" not in settings.AUTHENTICATION_BACKENDS
    for path in ("/oidc/authenticate/", "/oidc/callback/", "/oidc/logout/"):
        with pytest.raises(Resolver404):
            resolve(path)
        assert Client().get(path).status_code in (302, 404)
    with pytest.raises(NoReverseMatch):
        reverse("oidc_authentication_init")
    assert "single sign-on" not in Client().get("/login/").content.decode()


CONFIGURED = {
    "OIDC_RP_CLIENT_ID": "agentstate",
    "OIDC_RP_CLIENT_SECRET": "secret",
    "OIDC_OP_AUTHORIZATION_ENDPOINT": ISSUER + "/authorize",
    "OIDC_OP_TOKEN_ENDPOINT": ISSUER + "/token",
    "OIDC_OP_USER_ENDPOINT": ISSUER + "/userinfo",
    "OIDC_OP_JWKS_ENDPOINT": ISSUER + "/jwks",
    "OIDC_ROLE_MAP": "agents-admins=admin, agents-viewers=viewer",
}
PROBE = """
import django
django.setup()
from django.conf import settings
from django.test import Client
from django.urls import reverse
print(settings.AUTHENTICATION_BACKENDS[-1])
print(reverse("oidc_authentication_init"), reverse("oidc_authentication_callback"))
print(settings.OIDC_ROLE_MAP, settings.OIDC_OP_ISSUER)
print("single sign-on" in Client().get("/login/").content.decode())
"""


def _settings_process(env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in processes.process_env().items() if not k.startswith("OIDC_")}
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=processes.BASE_DIR,
    )


def test_with_oidc_settings_the_backend_and_urls_are_wired(db):
    done = _settings_process(CONFIGURED)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()[-4:]
    assert lines[0] == "tenants.auth.oidc.TenantOIDCBackend"
    assert lines[1] == "/oidc/authenticate/ /oidc/callback/"
    assert lines[2] == "{'agents-admins': 'admin', 'agents-viewers': 'viewer'} " + ISSUER
    assert lines[3] == "True"  # the login page offers it


@pytest.mark.parametrize(
    "env,named",
    [
        ({"OIDC_RP_CLIENT_ID": "x"}, "OIDC_RP_CLIENT_SECRET"),
        ({**CONFIGURED, "OIDC_OP_JWKS_ENDPOINT": ""}, "OIDC_OP_JWKS_ENDPOINT"),
        ({**CONFIGURED, "OIDC_ROLE_MAP": "agents-admins=root"}, "OIDC_ROLE_MAP"),
        ({**CONFIGURED, "OIDC_DEFAULT_ROLE": "owner"}, "OIDC_DEFAULT_ROLE"),
    ],
)
def test_incomplete_or_wrong_oidc_settings_stop_startup_naming_them(db, env, named):
    done = _settings_process(env)
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and named in done.stderr
