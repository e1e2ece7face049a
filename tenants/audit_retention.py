"""Audit retention: a tenant's audit events older than its `audit_retention_days` go, oldest
first, a batch per transaction (run by beat with the other retention sweeps)."""

from __future__ import annotations

import datetime as dt

from django.db import connection
from django.utils import timezone

from core import sql
from tenants.models import Tenant
from tenants.scope import system_scope

PURGE_OLD_SQL = sql.load("tenants", "purge_old_audit_events")


def audit_purge_old(*, now: dt.datetime | None = None, batch: int = 1000) -> dict[str, int]:
    """Delete each tenant's audit events older than its `audit_retention_days` (None keeps
    them forever), oldest first, a batch per transaction in the system context `audit_retention`
    (which records what it deleted). Events of no tenant (the system context's own) stay.
    Returns the count per tenant."""
    now = now or timezone.now()
    with system_scope("audit_retention"):
        keeping = list(
            Tenant.objects.filter(audit_retention_days__isnull=False).values_list(
                "pk", "audit_retention_days"
            )
        )
    deleted: dict[str, int] = {}
    for tenant_id, days in keeping:
        cutoff = now - dt.timedelta(days=days)
        while True:
            with system_scope("audit_retention") as ctx, connection.cursor() as cursor:
                cursor.execute(
                    PURGE_OLD_SQL, {"tenant": tenant_id, "cutoff": cutoff, "batch": batch}
                )
                gone = len(cursor.fetchall())
                if gone:
                    ctx.record(deleted=gone, by_tenant={str(tenant_id): gone})
            if gone:
                deleted[str(tenant_id)] = deleted.get(str(tenant_id), 0) + gone
            if gone < batch:
                break
    return deleted
