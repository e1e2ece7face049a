"""Audit retention (run by beat with the other retention sweeps).

The audit log is partitioned by month of `created_at` (core/partitions.py, migration 0009).
Each sweep:

1. creates the partitions of this month and the next AUDIT_MONTHS_AHEAD;
2. drops every month whose last day is older than the shortest window any tenant keeps (a
   tenant's `audit_retention_days`; AUDIT_SYSTEM_RETENTION_DAYS for events of no tenant):
   the rows some tenant must still keep (a longer window, or "keep forever") are moved into
   the default partition first, so such a tenant does not pin the month for the others;
3. deletes what is left past each tenant's window (rows moved into the default partition,
   months not yet droppable) oldest first, a batch per transaction.

Every change is done in a named system context, which records it in the audit log.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.db import OperationalError, connection
from django.utils import timezone

from core import partitions, sql
from tenants.models import Tenant
from tenants.scope import system_scope

logger = logging.getLogger(__name__)

TABLE = "tenants_auditevent"
AUDIT_MONTHS_AHEAD = 2
PURGE_OLD_SQL = sql.load("tenants", "purge_old_audit_events")
PURGE_OLD_SYSTEM_SQL = sql.load("tenants", "purge_old_system_audit_events")
# The rows of a month being dropped that must stay: a tenant's inside its window (or kept
# forever), and events of no tenant inside the system window. Rows of a tenant gone go.
KEEP = """
    (e.tenant_id IS NULL
     AND (%(system_days)s = 0 OR e.created_at >= %(now)s - make_interval(days => %(system_days)s)))
    OR EXISTS (SELECT 1 FROM tenants_tenant t
                WHERE t.id = e.tenant_id
                  AND (t.audit_retention_days IS NULL
                       OR e.created_at >= %(now)s - make_interval(days => t.audit_retention_days)))
"""


def audit_purge_old(*, now: dt.datetime | None = None, batch: int = 1000) -> dict[str, int]:
    """Every step above; returns the rows deleted per tenant ("system" for events of no
    tenant), those of dropped months included."""
    now = now or timezone.now()
    audit_months_ahead(now=now)
    deleted: dict[str, int] = {}
    for key, count in audit_drop_old_months(now=now).items():
        deleted[key] = deleted.get(key, 0) + count
    with system_scope("audit_retention"):
        keeping = list(
            Tenant.objects.filter(audit_retention_days__isnull=False)
            .order_by("pk")
            .values_list("pk", "audit_retention_days")
        )
    for tenant_id, days in keeping:
        gone = _batches(
            PURGE_OLD_SQL, str(tenant_id), tenant_id, now - dt.timedelta(days=days), batch
        )
        if gone:
            deleted[str(tenant_id)] = deleted.get(str(tenant_id), 0) + gone
    if settings.AUDIT_SYSTEM_RETENTION_DAYS:
        cutoff = now - dt.timedelta(days=settings.AUDIT_SYSTEM_RETENTION_DAYS)
        gone = _batches(PURGE_OLD_SYSTEM_SQL, "system", None, cutoff, batch)
        if gone:
            deleted["system"] = deleted.get("system", 0) + gone
    return deleted


def _batches(statement: str, label: str, tenant_id, cutoff: dt.datetime, batch: int) -> int:
    """Delete one owner's events older than `cutoff`, oldest first, a batch per transaction."""
    total = 0
    while True:
        with system_scope("audit_retention") as ctx, connection.cursor() as cursor:
            cursor.execute(statement, {"tenant": tenant_id, "cutoff": cutoff, "batch": batch})
            gone = len(cursor.fetchall())
            if gone:
                ctx.record(deleted=gone, by_tenant={label: gone})
        total += gone
        if gone < batch:
            return total


def audit_months_ahead(*, now: dt.datetime | None = None) -> int:
    """Create the partitions of this month and the next AUDIT_MONTHS_AHEAD (the missing ones);
    answers how many were created."""
    now = now or timezone.now()
    wanted = partitions.months_between(now, partitions.add_months(now, AUDIT_MONTHS_AHEAD))
    with system_scope("audit_partitions") as ctx, connection.cursor() as cursor:
        created = partitions.ensure_months(cursor, TABLE, "created_at", wanted)
        if created:
            ctx.record(created=created)
    return created


def audit_drop_old_months(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Drop each month past the shortest window any owner keeps, moving the rows still kept
    into the default partition first; answers the rows dropped per tenant. A month whose lock
    is not had within 2 s (a long query reading the log) waits for the next sweep."""
    now = now or timezone.now()
    shortest = _shortest_window_days()
    if shortest is None:
        return {}
    dropped: dict[str, int] = {}
    with system_scope("audit_partitions"), connection.cursor() as cursor:
        old = partitions.ended_by(cursor, TABLE, now - dt.timedelta(days=shortest))
    params = {"now": now, "system_days": settings.AUDIT_SYSTEM_RETENTION_DAYS}
    for month in old:
        try:
            with system_scope("audit_partitions") as ctx, connection.cursor() as cursor:
                gone, kept = partitions.drop_counted(cursor, TABLE, month, keep=KEEP, params=params)
                ctx.record(month=f"{month:%Y-%m}", deleted=sum(gone.values()), kept=kept,
                           by_tenant=gone)  # fmt: skip
        except OperationalError:
            logger.warning("audit month %s not dropped this time: its lock was busy", month)
            continue
        for key, count in gone.items():
            dropped[key] = dropped.get(key, 0) + count
    return dropped


def _shortest_window_days() -> int | None:
    """The fewest days any owner keeps its events (None: every one keeps them forever)."""
    with system_scope("audit_partitions"):
        windows = list(
            Tenant.objects.filter(audit_retention_days__isnull=False)
            .order_by()
            .values_list("audit_retention_days", flat=True)
            .distinct()
        )
    if settings.AUDIT_SYSTEM_RETENTION_DAYS:
        windows.append(settings.AUDIT_SYSTEM_RETENTION_DAYS)
    return min(windows) if windows else None
