"""A person's own MCP tokens: they connect their assistant to their own memories.

A personal token is an `ApiKey` row with `user` set (docs/memory.md says why not a table of
its own): shown once, stored as a SHA-256, listed by prefix, revocable, expiring, counted in
the rate limits as a key of its own. It differs from an integration's key in what it
reaches, checked at every use:

- it is `mcp_<tenant>_<secret>`, and only the MCP server accepts it (the REST API refuses
  the prefix, and refuses any key with an owner whatever its prefix);
- it acts as its person (a principal with that user and no role), so it reaches their own
  memories only, never another member's, whatever the person's role;
- it works while its person is an active member of the tenant: removed, it is refused.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from tenants import errors, scope
from tenants.audit import audit_record
from tenants.models import ApiKey, Membership, Scope, Tenant
from tenants.principal import Principal
from tenants.services import api_key_hash, api_key_touch

PREFIX = "mcp"
MAX_ACTIVE = 20  # per person and tenant: every door has a limit
EXPIRY_DAYS = (30, 90, 365)  # or never
READ_ONLY = [Scope.READ.value]
READ_WRITE = [Scope.READ.value, Scope.WRITE.value]


class TooManyTokens(errors.AppError):
    code = "too_many_tokens"
    status = 409
    message = f"You have {MAX_ACTIVE} active assistant tokens: revoke one you no longer use first."


class TokenRefused(Exception):
    """Why a personal token does not authenticate, in words safe to tell its holder."""


@dataclass(frozen=True)
class CreatedToken:
    key: ApiKey
    raw: str  # shown once, never stored


def is_personal(token: str) -> bool:
    return token.startswith(PREFIX + "_")


def tokens_of(*, tenant: Tenant, user) -> QuerySet[ApiKey]:
    """A person's own tokens in this tenant, newest first (revoked ones included)."""
    return ApiKey.objects.for_tenant(tenant).filter(user=user).order_by("-created_at")


def token_of(*, tenant: Tenant, user, token_id: uuid.UUID) -> ApiKey | None:
    return tokens_of(tenant=tenant, user=user).filter(pk=token_id).first()


@transaction.atomic
def token_create(
    *, actor: Principal, name: str, write: bool, expires_in_days: int | None
) -> CreatedToken:
    """A token for the signed-in person's own memories; the raw token is the only copy."""
    if actor.user is None or actor.api_key is not None:
        raise errors.PermissionDenied("Only a signed-in person makes tokens for themselves.")
    if expires_in_days is not None and expires_in_days not in EXPIRY_DAYS:
        raise errors.InvalidExpiry(
            "A token expires in 30, 90 or 365 days, or never.", detail={"days": EXPIRY_DAYS}
        )
    # The person's rows locked: two creations at once cannot both pass the limit.
    active = list(
        tokens_of(tenant=actor.tenant, user=actor.user)
        .filter(revoked_at__isnull=True)
        .select_for_update()
        .values_list("pk", "expires_at")
    )
    now = timezone.now()
    if sum(1 for _, expires in active if expires is None or expires > now) >= MAX_ACTIVE:
        raise TooManyTokens()
    secret = secrets.token_urlsafe(32)
    raw = f"{PREFIX}_{actor.tenant.pk.hex}_{secret}"
    expires_at = now + timedelta(days=expires_in_days) if expires_in_days else None
    key = ApiKey.objects.create(
        tenant=actor.tenant,
        user=actor.user,
        name=name,
        prefix=secret[:8],
        key_hash=api_key_hash(raw),
        scopes=READ_WRITE if write else READ_ONLY,
        created_by=actor.user,
        expires_at=expires_at,
    )
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="personal_token.created",
        target=key,
        after={
            "name": name,
            "prefix": key.prefix,
            "scopes": key.scopes,
            "expires_at": expires_at.isoformat() if expires_at else None,
        },
    )
    return CreatedToken(key=key, raw=raw)


@transaction.atomic
def token_revoke(*, actor: Principal, key: ApiKey) -> ApiKey:
    """Revoke one of the actor's own tokens (a conditional update: a second revoke is a 409)."""
    now = timezone.now()
    updated = (
        tokens_of(tenant=actor.tenant, user=actor.user)
        .filter(pk=key.pk, revoked_at__isnull=True)
        .update(revoked_at=now)
    )
    if not updated:
        raise errors.ApiKeyAlreadyRevoked("This token is already revoked.")
    key.revoked_at = now
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="personal_token.revoked",
        target=key,
        before={"revoked_at": None},
        after={"revoked_at": now.isoformat(), "prefix": key.prefix},
    )
    return key


def token_resolve(token: str) -> Principal:
    """The principal a personal token acts as (its person, no role), or TokenRefused.

    As `api_key_resolve`, the token names its tenant, and the lookup runs under that tenant's
    row-level security, set for the rest of the current transaction."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or len(parts[1]) != 32:
        raise TokenRefused("The token is malformed.")
    try:
        tenant_id = uuid.UUID(hex=parts[1])
    except ValueError:
        raise TokenRefused("The token is malformed.") from None
    scope.activate(tenant_id=tenant_id)
    key = (
        ApiKey.objects.for_tenant(tenant_id)
        .select_related("tenant", "user")
        .filter(key_hash=api_key_hash(token), user__isnull=False)
        .first()
    )
    if key is None:
        raise TokenRefused("The token is unknown.")
    if not key.is_active:
        raise TokenRefused("This token was revoked; make a new one on your privacy page.")
    if key.is_expired:
        raise TokenRefused("This token has expired; make a new one on your privacy page.")
    member = Membership.objects.for_tenant(tenant_id).filter(user_id=key.user_id).exists()
    if not member or not key.user.is_active:
        raise TokenRefused("The person this token belongs to is no longer a member here.")
    api_key_touch(key=key)
    return Principal.for_personal_token(key, key.tenant)
