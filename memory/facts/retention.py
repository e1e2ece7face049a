"""Retention sweeps run by Celery beat: expired facts, old conversations (and runs started
without one), checkpoints of finished runs, idempotency records, audit events. Each batch is
its own short transaction (no long locks) inside a named system context, and each sweep's
counts go to the audit log.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents.runtime.models import AgentSession, Run
from agents.runtime.sweeps import expire_idempotency
from core import sql
from tenants.audit_retention import audit_purge_old
from tenants.scope import system_scope

# Whole lineages whose live version expired: history goes with the fact it explains.
PURGE_EXPIRED_SQL = sql.load("memory", "purge_expired_facts")
# Old versions whose own retention ended while the live version lives on.
PURGE_OLD_VERSIONS_SQL = sql.load("memory", "purge_old_versions")
OLD_SESSIONS_SQL = sql.load("memory", "find_old_sessions")
OLD_CHECKPOINTS_SQL = sql.load("memory", "purge_old_checkpoints")
OLD_SESSIONLESS_RUNS_SQL = sql.load("memory", "find_old_sessionless_runs")


def _batched(name: str, sql: str, *, now: dt.datetime, batch: int, max_batches: int) -> Counter:
    """Run a DELETE … RETURNING tenant_id batch by batch, each in its own transaction."""
    per_tenant: Counter = Counter()
    for _ in range(max_batches):
        with system_scope(name) as ctx, connection.cursor() as cursor:
            cursor.execute(sql, {"now": now, "batch": batch})
            rows = Counter(str(r[0]) for r in cursor.fetchall())
            if rows:
                ctx.record(deleted=sum(rows.values()), by_tenant=dict(rows))
        per_tenant.update(rows)
        if sum(rows.values()) < batch:
            break
    return per_tenant


def purge_expired_facts(
    *, now: dt.datetime | None = None, batch: int | None = None, max_batches: int = 1000
) -> int:
    """Hard-delete facts past their expiry (with their history), in batches."""
    now = now or timezone.now()
    batch = batch or settings.MEMORY_PURGE_BATCH
    heads = _batched(
        "memory_ttl_sweep", PURGE_EXPIRED_SQL, now=now, batch=batch, max_batches=max_batches
    )
    old = _batched(
        "memory_ttl_sweep", PURGE_OLD_VERSIONS_SQL, now=now, batch=batch, max_batches=max_batches
    )
    return sum(heads.values()) + sum(old.values())


def _found_and_deleted(
    name: str, sql: str, model: Any, noun: str, *, now: dt.datetime, batch: int, max_batches: int
) -> int:
    """Find rows with `sql` (id, tenant_id) batch by batch, each batch in its own transaction,
    and delete them through the ORM, which follows their cascade."""
    total = 0
    for _ in range(max_batches):
        with system_scope(name) as ctx, connection.cursor() as cursor:
            cursor.execute(sql, {"now": now, "batch": batch})
            rows = cursor.fetchall()
            if rows:
                _, counts = model.objects.filter(pk__in=[r[0] for r in rows]).delete()
                ctx.record(
                    **{noun: len(rows)},
                    deleted=counts,
                    by_tenant=dict(Counter(str(r[1]) for r in rows)),
                )
        total += len(rows)
        if len(rows) < batch:
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
    deleted = _batched(
        "checkpoint_retention", OLD_CHECKPOINTS_SQL, now=now, batch=batch, max_batches=max_batches
    )
    return sum(deleted.values())


def sweep_all(*, now: dt.datetime | None = None) -> dict[str, Any]:
    """Every retention sweep once; what beat runs."""
    return {
        "facts": purge_expired_facts(now=now),
        "sessions": purge_old_sessions(now=now),
        "runs": purge_old_sessionless_runs(now=now),
        "checkpoints": purge_old_checkpoints(now=now),
        "idempotency": expire_idempotency(),
        "audit": sum(audit_purge_old(now=now).values()),
    }
