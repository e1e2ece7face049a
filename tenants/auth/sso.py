"""Single sign-on: who an OpenID Connect sign-in is, and which tenants it lets them into.

An SSO sign-in is matched to an account by the provider's subject (`SsoIdentity`), never by
email or username, so it cannot take over an account made with a password. A first sign-in
creates an account without a usable password. At every sign-in:

- the tenant claim (`OIDC_TENANT_CLAIM`) and role claim (`OIDC_ROLE_CLAIM`, values mapped
  through `OIDC_ROLE_MAP`, else `OIDC_DEFAULT_ROLE`) add the memberships the person lacks;
  an existing membership keeps its role (admins change roles on the members page);
- when the provider says the email is verified (`email_verified` true), every open invitation
  sent to that address is accepted.

docs/members.md describes the settings with examples.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from tenants.auth.invitations import Accepted, invitations_accept_for_email, normalize_email
from tenants.models import Role, SsoIdentity, Tenant
from tenants.scope import system_scope, tenant_scope
from tenants.services import membership_join

logger = logging.getLogger(__name__)

# The strongest role wins when several claim values map to roles.
ROLE_RANK = {Role.VIEWER: 1, Role.MEMBER: 2, Role.MANAGER: 3, Role.ADMIN: 4}
MAX_TENANTS_PER_CLAIM = 50
ACTOR = "sso"


@dataclass
class SignIn:
    joined: list[str] = field(default_factory=list)  # tenant slugs added from the claims
    accepted: list[Accepted] = field(default_factory=list)


def claim(claims: dict[str, Any], path: str) -> Any:
    """A claim by name; dots walk into objects ("realm_access.roles")."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value if isinstance(v, str | int) and not isinstance(v, bool)]
    return []


def _role_for(values: list[str], role_map: dict[str, str]) -> str | None:
    """The strongest role the values map to (without a map, values that are role names)."""
    roles = [role_map.get(v) if role_map else v for v in values]
    known = [r for r in roles if r in ROLE_RANK]
    return max(known, key=ROLE_RANK.__getitem__) if known else None


def grants_from_claims(
    claims: dict[str, Any],
    *,
    tenant_claim: str,
    role_claim: str = "",
    role_map: dict[str, str] | None = None,
    default_role: str = "",
) -> dict[str, str]:
    """Tenant slug → role that these claims give; {} without a tenant claim.

    The tenant claim is a slug, a list of slugs (one role for all, from the role claim), or
    an object {slug: role value} (each tenant its own role, mapped like the role claim's).
    """
    if not tenant_claim:
        return {}
    role_map = role_map or {}
    value = claim(claims, tenant_claim)
    if isinstance(value, dict):
        per_tenant = {
            str(slug): _role_for(_strings(v), role_map) or default_role
            for slug, v in list(value.items())[:MAX_TENANTS_PER_CLAIM]
        }
        return {slug: role for slug, role in per_tenant.items() if slug and role}
    role = (
        _role_for(_strings(claim(claims, role_claim)), role_map) if role_claim else None
    ) or default_role
    if role not in ROLE_RANK:
        return {}
    slugs = [s for s in _strings(value)[:MAX_TENANTS_PER_CLAIM] if s]
    return dict.fromkeys(slugs, role)


def grants_from_settings(claims: dict[str, Any]) -> dict[str, str]:
    return grants_from_claims(
        claims,
        tenant_claim=settings.OIDC_TENANT_CLAIM,
        role_claim=settings.OIDC_ROLE_CLAIM,
        role_map=settings.OIDC_ROLE_MAP,
        default_role=settings.OIDC_DEFAULT_ROLE,
    )


def verified_email(claims: dict[str, Any]) -> str:
    """The email if the provider vouches for it (`email_verified` true), else ""."""
    email = claims.get("email")
    if claims.get("email_verified") is not True or not isinstance(email, str):
        return ""
    return normalize_email(email)[:254]


# --- accounts -------------------------------------------------------------------------------------


def users_for_claims(claims: dict[str, Any]):
    """The account linked to this provider subject (a queryset of at most one)."""
    return get_user_model().objects.filter(
        sso_identities__issuer=settings.OIDC_OP_ISSUER,
        sso_identities__subject=str(claims.get("sub", "")),
    )


_UNSAFE = re.compile(r"[^\w.@+-]")


def _free_username(claims: dict[str, Any]) -> str:
    wanted = claims.get("preferred_username") or str(claims.get("email") or "").split("@")[0]
    base = _UNSAFE.sub("", str(wanted))[:140] or "user"
    users = get_user_model().objects
    candidate, n = base, 1
    while users.filter(username__iexact=candidate).exists():
        n += 1
        candidate = f"{base}{n}"
    return candidate


@transaction.atomic
def sso_user_create(claims: dict[str, Any]):
    """A new account for a first SSO sign-in: no usable password, linked to the subject."""
    user = get_user_model().objects.create_user(
        username=_free_username(claims), password=None, email=verified_email(claims)
    )
    SsoIdentity.objects.create(
        issuer=settings.OIDC_OP_ISSUER, subject=str(claims["sub"])[:255], user=user
    )
    return user


def sso_user_update(user, claims: dict[str, Any]):
    """Keep the account's address in step with a verified one from the provider."""
    email = verified_email(claims)
    if email and email != user.email:
        user.email = email
        user.save(update_fields=["email"])
    return user


@transaction.atomic
def sso_sign_in(*, user, claims: dict[str, Any]) -> SignIn:
    """Add the memberships the claims give and accept invitations of a verified address."""
    done = SignIn()
    grants = grants_from_settings(claims)
    if grants:
        with system_scope("sso_tenants"):
            tenants = list(Tenant.objects.filter(slug__in=list(grants)))
        unknown = set(grants) - {t.slug for t in tenants}
        if unknown:
            logger.warning("SSO claims name %d tenant(s) that do not exist", len(unknown))
        for tenant in tenants:
            if _join(tenant, user, grants[tenant.slug]):
                done.joined.append(tenant.slug)
    email = verified_email(claims)
    if email:
        done.accepted = invitations_accept_for_email(user=user, email=email)
    return done


def _join(tenant: Tenant, user, role: str) -> bool:
    with tenant_scope(tenant.pk, user_id=user.pk):
        _, created = membership_join(
            tenant=tenant, user=user, role=role, actor=ACTOR, how={"via": "sso claims"}
        )
    return created
