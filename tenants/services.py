"""Writes for the tenants app."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from axes.utils import reset as axes_reset
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from tenants import errors, scope
from tenants.audit import audit_record
from tenants.models import ApiKey, Membership, Role, Scope, Tenant
from tenants.principal import Principal
from tenants.rates import validate_overrides

API_KEY_PREFIX = "ak"
API_KEY_MAX_DAYS = 3650


def _hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


# What api_key_create issues: `ak_`, the tenant id in 32 lowercase hex digits, `_`, then a
# token_urlsafe secret. Anything else is malformed before any lookup (`int(x, 16)` alone would
# pass "-…", "+…", "0x…", whitespace and non-ASCII digits, and uuid.UUID would then fail).
_API_KEY_SHAPE = re.compile(rf"{API_KEY_PREFIX}_([0-9a-f]{{32}})_[A-Za-z0-9_-]{{1,256}}", re.ASCII)


def parse_api_key(raw: str) -> tuple[str, str] | None:
    """Split `ak_<tenant hex>_<secret>` into (tenant id hex, full key), or None."""
    match = _API_KEY_SHAPE.fullmatch(raw)
    if match is None:
        return None
    return match.group(1), raw


def api_key_hash(raw: str) -> str:
    return _hash_key(raw)


@dataclass(frozen=True)
class CreatedApiKey:
    key: ApiKey
    raw: str  # shown once, never stored


@transaction.atomic
def api_key_create(
    *,
    actor: Principal,
    name: str,
    scopes: list[str],
    expires_in_days: int | None = None,
    actor_label: str = "",
) -> CreatedApiKey:
    """Create a key; the returned raw secret is the only copy there will ever be.

    `actor_label` names who acted in the audit log when no person did (`manage.py`)."""
    unknown = sorted(set(scopes) - set(Scope.values))
    if unknown or not scopes:
        raise errors.InvalidScopes(
            f"Scopes must be a non-empty subset of {', '.join(Scope.values)}.",
            detail={"unknown": unknown},
        )
    expires_at = None
    if expires_in_days is not None:
        if not 1 <= expires_in_days <= API_KEY_MAX_DAYS:
            raise errors.InvalidExpiry(detail={"max_days": API_KEY_MAX_DAYS})
        expires_at = timezone.now() + timedelta(days=expires_in_days)
    secret = secrets.token_urlsafe(32)
    raw = f"{API_KEY_PREFIX}_{actor.tenant.pk.hex}_{secret}"
    key = ApiKey.objects.create(
        tenant=actor.tenant,
        name=name,
        prefix=secret[:8],
        key_hash=_hash_key(raw),
        scopes=sorted(set(scopes)),
        created_by=actor.user,
        expires_at=expires_at,
    )
    audit_record(
        tenant=actor.tenant,
        actor=actor_label or actor,
        action="api_key.created",
        target=key,
        after={
            "name": name,
            "prefix": key.prefix,
            "scopes": key.scopes,
            "expires_at": expires_at.isoformat() if expires_at else None,
        },
    )
    return CreatedApiKey(key=key, raw=raw)


@transaction.atomic
def api_key_revoke(*, actor: Principal, key: ApiKey) -> ApiKey:
    # Conditional update: two admins revoking at once produce one revocation and one 409.
    now = timezone.now()
    updated = (
        ApiKey.objects.for_tenant(actor.tenant)
        .filter(pk=key.pk, revoked_at__isnull=True)
        .update(revoked_at=now)
    )
    if not updated:
        raise errors.ApiKeyAlreadyRevoked()
    key.revoked_at = now
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="api_key.revoked",
        target=key,
        before={"revoked_at": None},
        after={"revoked_at": now.isoformat()},
    )
    return key


def api_key_touch(*, key: ApiKey) -> None:
    """Record use at most once a minute, so reads do not each cost a write; and after the
    request's own transaction has committed, in one of its own (on the primary), so a GET's
    transaction writes nothing and may read from a replica. A request that fails records
    nothing."""
    now = timezone.now()
    if key.last_used_at and (now - key.last_used_at).total_seconds() < 60:
        return
    key.last_used_at = now

    def record() -> None:
        with scope.tenant_scope(key.tenant_id):
            ApiKey.objects.for_tenant(key.tenant_id).filter(pk=key.pk).update(last_used_at=now)

    transaction.on_commit(record)


@transaction.atomic
def membership_set_role(*, actor: Principal, membership: Membership, role: str) -> Membership:
    if role not in Role.values:
        raise errors.AppError(f"Role must be one of {', '.join(Role.values)}.")
    before = membership.role
    if before == Role.ADMIN and role != Role.ADMIN:
        _keep_an_admin(actor.tenant, errors.LastAdmin)
    membership.role = role
    membership.save(update_fields=["role"])
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="membership.role_changed",
        target=membership,
        before={"role": before},
        after={"role": role, "user": membership.user.get_username()},
    )
    return membership


def _keep_an_admin(tenant: Tenant, error: type[errors.AppError]) -> None:
    """Refuse (with `error`) when the tenant has one admin left, who is about to go.

    The admins' rows are locked (a count alone takes no lock, with or without FOR UPDATE):
    two admins demoting or removing each other at once are serialized, and the second one
    sees a single admin and is refused."""
    admins = Membership.objects.for_tenant(tenant).filter(role=Role.ADMIN).select_for_update()
    if len(list(admins.values_list("pk", flat=True))) <= 1:
        raise error()


@transaction.atomic
def membership_remove(*, actor: Principal, membership: Membership) -> None:
    """Take a person out of the tenant; never its last admin."""
    if membership.role == Role.ADMIN:
        _keep_an_admin(actor.tenant, errors.LastAdminRemoval)
    deleted, _ = Membership.objects.for_tenant(actor.tenant).filter(pk=membership.pk).delete()
    if not deleted:
        raise errors.NotFound("This person is no longer a member.")
    # Their own MCP tokens end with the membership: joining again does not revive them.
    revoked = (
        ApiKey.objects.for_tenant(actor.tenant)
        .filter(user_id=membership.user_id, revoked_at__isnull=True)
        .update(revoked_at=timezone.now())
    )
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="membership.removed",
        target_type=Membership._meta.label_lower,
        target_id=str(membership.pk),
        before={"user": membership.user.get_username(), "role": membership.role},
        after={"personal_tokens_revoked": revoked} if revoked else None,
    )


@transaction.atomic
def member_unlock(*, actor: Principal, membership: Membership) -> int:
    """Clear a member's failed sign-ins (every address), ending a lockout; the count cleared."""
    username = membership.user.get_username()
    cleared = axes_reset(username=username)
    audit_record(
        tenant=actor.tenant,
        actor=actor,
        action="membership.unlocked",
        target=membership,
        after={"user": username, "attempts_cleared": cleared},
    )
    return cleared


def tenant_create(*, slug: str, name: str, actor_label: str = "system") -> Tenant:
    """Provision a tenant. Creating one spans tenants, so it runs in the system context."""
    with scope.system_scope("tenant_provisioning") as ctx:
        tenant = Tenant.objects.create(slug=slug, name=name)
        ctx.record(tenant=slug, by=actor_label)
        audit_record(tenant=tenant, actor=actor_label, action="tenant.created", target=tenant)
    return tenant


def tenant_set_rate_limits(
    *, slug: str, limits: dict[str, str], actor_label: str = "system"
) -> Tenant:
    """Replace a tenant's API rate limit overrides ({} drops them); validated and audited."""
    validate_overrides(limits)
    with scope.system_scope("tenant_rate_limits") as ctx:
        tenant = Tenant.objects.select_for_update().filter(slug=slug).first()
        if tenant is None:
            raise errors.NotFound(f"No tenant {slug!r}.")
        before = tenant.api_rate_limits
        tenant.api_rate_limits = limits
        tenant.save(update_fields=["api_rate_limits"])
        ctx.record(tenant=slug, by=actor_label)
        audit_record(
            tenant=tenant,
            actor=actor_label,
            action="tenant.rate_limits_changed",
            target=tenant,
            before=before,
            after=limits,
        )
    return tenant


def membership_add(*, tenant: Tenant, user, role: str, actor_label: str = "system") -> Membership:
    with scope.tenant_scope(tenant.pk):
        return membership_join(tenant=tenant, user=user, role=role, actor=actor_label)[0]


def membership_join(
    *, tenant: Tenant, user, role: str, actor: Any, how: dict[str, Any] | None = None
) -> tuple[Membership, bool]:
    """`user` joins `tenant` as `role`, unless already a member (whose role stays): the
    membership and whether it is new. A new one is audited as `membership.added` by `actor`,
    with `how` it came about (an invitation, SSO claims). In the caller's tenant scope."""
    membership, created = Membership.objects.get_or_create(
        tenant=tenant, user=user, defaults={"role": role}
    )
    if created:
        audit_record(
            tenant=tenant,
            actor=actor,
            action="membership.added",
            target=membership,
            after={"user": user.get_username(), "role": role, **(how or {})},
        )
    return membership, created


def user_create(*, username: str, password: str | None, email: str = "", **extra: Any):
    """A new user; with password None, an unusable one (nobody signs in until it is set)."""
    return get_user_model().objects.create_user(
        username=username, password=password, email=email, **extra
    )
