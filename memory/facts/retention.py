"""Retention sweeps run by Celery beat: expired facts, old conversations (and runs started
without one), checkpoints of finished runs, idempotency records, audit events. Each batch is
its own short transaction (no long locks) inside a named system context, and each sweep's
counts go to the audit log.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents.runtime import run_partitions
from agents.runtime.models import AgentSession, Run
from agents.runtime.sweeps import expire_idempotency
from core import sql
from tenants.audit_retention import audit_purge_old
from tenants.models import Tenant
from tenants.scope import system_scope

# The tenants with facts past their expiry (a read without locks).
EXPIRED_TENANTS_SQL = sql.load("memory", "tenants_with_expired_facts")
# Whole lineages whose live version expired: history goes with the fact it explains.
PURGE_EXPIRED_SQL = sql.load("memory", "purge_expired_facts")
# Old versions whose own retention ended while the live version lives on.
PURGE_OLD_VERSIONS_SQL = sql.load("memory", "purge_old_versions")
OLD_SESSIONS_SQL = sql.load("memory", "find_old_sessions")
OLD_CHECKPOINTS_SQL = sql.load("memory", "purge_old_checkpoints")
OLD_SESSIONLESS_RUNS_SQL = sql.load("memory", "find_old_sessionless_runs")


def _tenants_keeping(name: str, field: str) -> list[Any]:
    """The tenants whose `field` (a retention period) is set: read without locks, in the
    system context `name`. Every sweep below then works tenant by tenant, so each statement
    that locks or deletes rows names one tenant (under Citus, one shard)."""
    with system_scope(name):
        return list(
            Tenant.objects.filter(**{f"{field}__isnull": False})
            .order_by("pk")
            .values_list("pk", flat=True)
        )


def _batched(
    name: str, sql: str, tenant_id: Any, *, now: dt.datetime, batch: int, max_batches: int
) -> int:
    """Run a DELETE … RETURNING of one tenant batch by batch, each in its own transaction."""
    total = 0
    for _ in range(max_batches):
        with system_scope(name) as ctx, connection.cursor() as cursor:
            cursor.execute(sql, {"tenant": tenant_id, "now": now, "batch": batch})
            deleted = len(cursor.fetchall())
            if deleted:
                ctx.record(deleted=deleted, by_tenant={str(tenant_id): deleted})
        total += deleted
        if deleted < batch:
            break
    return total


def purge_expired_facts(
    *, now: dt.datetime | None = None, batch: int | None = None, max_batches: int = 1000
) -> int:
    """Hard-delete facts past their expiry (with their history), in batches, tenant by
    tenant."""
    now = now or timezone.now()
    batch = batch or settings.MEMORY_PURGE_BATCH
    with system_scope("memory_ttl_sweep"), connection.cursor() as cursor:
        cursor.execute(EXPIRED_TENANTS_SQL, {"now": now})
        tenants = [tenant_id for (tenant_id,) in cursor.fetchall()]
    total = 0
    for tenant_id in tenants:
        for statement in (PURGE_EXPIRED_SQL, PURGE_OLD_VERSIONS_SQL):
            total += _batched(
                "memory_ttl_sweep", statement, tenant_id,
                now=now, batch=batch, max_batches=max_batches,
            )  # fmt: skip
    return total


def _found_and_deleted(
    name: str, sql: str, model: Any, noun: str, *, now: dt.datetime, batch: int, max_batches: int
) -> int:
    """Find rows with `sql` (id, tenant_id) batch by batch for each tenant that keeps
    conversations for a while, each batch in its own transaction, and delete them through the
    ORM, which follows their cascade."""
    total = 0
    for tenant_id in _tenants_keeping(name, "conversation_retention_days"):
        for _ in range(max_batches):
            with system_scope(name) as ctx, connection.cursor() as cursor:
                cursor.execute(sql, {"tenant": tenant_id, "now": now, "batch": batch})
                ids = [row[0] for row in cursor.fetchall()]
                if ids:
                    _, counts = model.objects.filter(tenant_id=tenant_id, pk__in=ids).delete()
                    ctx.record(
                        **{noun: len(ids)}, deleted=counts, by_tenant={str(tenant_id): len(ids)}
                    )
            total += len(ids)
            if len(ids) < batch:
                break
    return total


def purge_old_sessions(
    *, now: dt.datetime | None = None, batch: int = 200, max_batches: int = 100
) -> int:
    """Delete conversations (with their transcripts, runs, checkpoints and approvals) past
    the tenant's retention."""
    return _found_and_deleted(
        "conversation_retention", OLD_SESSIONS_SQL, AgentSession, "sessions",
        now=now or timezone.now(), batch=batch, max_batches=max_batches,
    )  # fmt: skip


def purge_old_sessionless_runs(
    *, now: dt.datetime | None = None, batch: int = 200, max_batches: int = 100
) -> int:
    """Delete runs started without a conversation (API runs) that finished longer ago than
    the tenant keeps conversations, with their checkpoints, events and attempts."""
    return _found_and_deleted(
        "run_retention", OLD_SESSIONLESS_RUNS_SQL, Run, "runs",
        now=now or timezone.now(), batch=batch, max_batches=max_batches,
    )  # fmt: skip


def purge_old_checkpoints(
    *, now: dt.datetime | None = None, batch: int = 1000, max_batches: int = 100
) -> int:
    """Delete the checkpoints of runs that finished longer ago than the tenant keeps them."""
    now = now or timezone.now()
    return sum(
        _batched(
            "checkpoint_retention",
            OLD_CHECKPOINTS_SQL,
            tenant_id,
            now=now,
            batch=batch,
            max_batches=max_batches,
        )  # fmt: skip
        for tenant_id in _tenants_keeping("checkpoint_retention", "checkpoint_retention_days")
    )


def sweep_all(*, now: dt.datetime | None = None) -> dict[str, Any]:
    """Every retention sweep once; what beat runs."""
    now = now or timezone.now()
    return {
        "facts": purge_expired_facts(now=now),
        "sessions": purge_old_sessions(now=now),
        "runs": purge_old_sessionless_runs(now=now),
        "checkpoints": purge_old_checkpoints(now=now),
        "idempotency": expire_idempotency(),
        "audit": sum(audit_purge_old(now=now).values()),
        # after the rows above went: a month whose runs are gone drops with nothing to keep
        "run_partitions": run_partitions.maintain(now=now),
    }
