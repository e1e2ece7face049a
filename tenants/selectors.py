"""Reads for the tenants app. Every read names its tenant (or its user, for memberships)."""

from __future__ import annotations

from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import QuerySet, Sum
from django.utils import timezone

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
