"""Reads for the tenants app. Every read names its tenant (or its user, for memberships)."""

from __future__ import annotations

from django.db.models import QuerySet

from tenants.models import ApiKey, AuditEvent, Membership, Tenant


def memberships_for_user(user) -> list[Membership]:
    return list(
        Membership.objects.filter(user=user).select_related("tenant").order_by("tenant__name")
    )


def members_for_tenant(*, tenant: Tenant) -> QuerySet[Membership]:
    return (
        Membership.objects.for_tenant(tenant)
        .select_related("user")
        .order_by("role", "user__username")
    )


def api_keys_for_tenant(*, tenant: Tenant) -> QuerySet[ApiKey]:
    return ApiKey.objects.for_tenant(tenant).select_related("created_by")


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
