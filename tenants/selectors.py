"""Reads for the tenants app. Every read names its tenant (or its user, for memberships)."""

from __future__ import annotations

import functools
from typing import Any

from axes.models import AccessAttempt
from django.conf import settings
from django.db import connection
from django.db.models import Field, QuerySet, Sum
from django.utils import timezone

from tenants import scope
from tenants.models import ApiKey, AuditEvent, Invitation, Membership, Tenant


def memberships_for_user(user, *, first: tuple[str, list[str]] | None = None) -> list[Membership]:
    """The user's memberships with their tenants, by tenant name: read on every request.

    The same rows as `Membership.objects.filter(user=user).select_related("tenant")
    .order_by("tenant__name")`, in one statement written once: building that queryset cost
    about 0.6 ms of Python per request, more than the database spent answering it. `first`:
    a statement (and its parameters) sent first in the same round trip (the row-level
    security settings the read needs).
    """
    sql, membership_fields, tenant_fields = _memberships_sql()
    with connection.cursor() as cursor:
        if first is None:
            cursor.execute(sql, [user.pk])
        else:
            cursor.execute(f"{first[0]}; {sql}", [*first[1], user.pk])
            cursor.nextset()
        rows = cursor.fetchall()
    width = len(membership_fields)
    found = []
    for row in rows:
        membership = model_from_row(Membership, membership_fields, row[:width])
        membership.tenant = model_from_row(Tenant, tenant_fields, row[width:])
        found.append(membership)
    return found


def own_memberships(user) -> list[Membership]:
    """The user's memberships, read as that user before any tenant is chosen: the current
    transaction's row-level security is set to the user alone, who may read their own."""
    activate, params = scope.activation(tenant_id=None, user_id=user.pk)
    return memberships_for_user(user, first=(activate, params))


@functools.cache
def _memberships_sql() -> tuple[str, list[Field], list[Field]]:
    membership_fields = list(Membership._meta.concrete_fields)
    tenant_fields = list(Tenant._meta.concrete_fields)
    columns = [f"m.{f.column}" for f in membership_fields]
    columns += [f"t.{f.column}" for f in tenant_fields]
    sql = (
        f"SELECT {', '.join(columns)} FROM {Membership._meta.db_table} m"
        f" JOIN {Tenant._meta.db_table} t ON t.id = m.tenant_id"
        " WHERE m.user_id = %s ORDER BY t.name"
    )
    return sql, membership_fields, tenant_fields


def model_from_row(model, fields: list[Field], values) -> Any:
    """An instance of `model` from a row of `fields`' columns read by a statement written once,
    as the ORM would have made it (each field's from_db_value applied)."""
    converted = [
        f.from_db_value(v, None, connection) if hasattr(f, "from_db_value") else v
        for f, v in zip(fields, values, strict=True)
    ]
    return model.from_db(connection.alias, [f.attname for f in fields], converted)


def members_for_tenant(*, tenant: Tenant) -> QuerySet[Membership]:
    return (
        Membership.objects.for_tenant(tenant)
        .select_related("user")
        .order_by("role", "user__username")
    )


def locked_out_usernames(*, tenant: Tenant) -> set[str]:
    """Members of the tenant whose sign-in is locked from some address (django-axes)."""
    # Axes' own rule: failures of one (username, address) within the cool-off reach the limit.
    attempts = AccessAttempt.objects.filter(
        username__in=Membership.objects.for_tenant(tenant).values("user__username")
    )
    if settings.AXES_COOLOFF_TIME:
        attempts = attempts.filter(attempt_time__gte=timezone.now() - settings.AXES_COOLOFF_TIME)
    locked = (
        attempts.values("username", "ip_address")
        .annotate(failures=Sum("failures_since_start"))
        .filter(failures__gte=settings.AXES_FAILURE_LIMIT)
    )
    return {row["username"] for row in locked}


def open_invitations_for_tenant(*, tenant: Tenant) -> QuerySet[Invitation]:
    """Invitations neither accepted nor revoked (expired ones too: they can be sent again)."""
    return (
        Invitation.objects.for_tenant(tenant)
        .filter(accepted_at__isnull=True, revoked_at__isnull=True)
        .select_related("invited_by")
        .order_by("-sent_at")
    )


def api_keys_for_tenant(*, tenant: Tenant) -> QuerySet[ApiKey]:
    """The tenant's integration keys (people's own MCP tokens are theirs: personal_tokens.py)."""
    return ApiKey.objects.for_tenant(tenant).filter(user__isnull=True).select_related("created_by")


def audit_events_for_tenant(
    *,
    tenant: Tenant,
    target_type: str | None = None,
    target_id: str | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[AuditEvent]:
    """Newest first, keyset-paginated by id."""
    events = AuditEvent.objects.for_tenant(tenant).select_related("actor_user")
    if target_type:
        events = events.filter(target_type=target_type)
    if target_id:
        events = events.filter(target_id=target_id)
    if before_id:
        events = events.filter(id__lt=before_id)
    return list(events.order_by("-id")[:limit])
