"""Cross-tenant sweeps run by Celery beat, each inside a named system context."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from agents.runtime import liveness, progress, queue
from agents.runtime.metrics import record_lost, record_sweep
from core import sql
from tenants.scope import system_scope

logger = logging.getLogger(__name__)

LEASE_OWNERS_SQL = sql.load("agents.runtime", "running_lease_owners")
TENANTS_OF_WORKER_SQL = sql.load("agents.runtime", "tenants_of_worker")
RECOVER_LOST_SQL = sql.load("agents.runtime", "requeue_lost_runs")
DUE_TENANTS_SQL = sql.load("agents.runtime", "tenants_with_due_runs")
WAKE_TIMERS_SQL = sql.load("agents.runtime", "wake_due_timers")
# Queued runs whose queue message may have been lost (broker restart, worker killed after
# taking the message): send another. A duplicate loses the claim and does nothing.
STALE_QUEUED_SQL = sql.load("agents.runtime", "touch_stale_queued_runs")
EXPIRE_IDEMPOTENCY_SQL = sql.load("agents.runtime", "delete_expired_idempotency_records")
# Tenants with due timers or stale queued runs swept per pass (the rest wait a second).
TENANTS_PER_PASS = 500


def recover() -> dict[str, int]:
    """Requeue runs of dead workers, wake due timers, re-send stale queue messages.

    Shard by shard: first a read without locks finds the tenants with work, then each
    tenant's runs are locked and changed by statements that name it (under Citus each runs
    on the tenant's shard; a cross-tenant `FOR UPDATE SKIP LOCKED` could not)."""
    with system_scope("run_recovery") as ctx, connection.cursor() as cursor:
        cursor.execute(LEASE_OWNERS_SQL)
        held = cursor.fetchall()
        owners = sorted({owner for _, owner, _ in held if owner})
        dead = set(liveness.dead_among(owners))
        params = _lost_params(sorted(dead), owners)
        lost: list[tuple] = []
        for tenant_id in _unique(t for t, owner, expired in held if expired or owner in dead):
            cursor.execute(RECOVER_LOST_SQL, {**params, "tenant": tenant_id})
            lost += [_announce_lost(*row) for row in cursor.fetchall()]
        stale_after = settings.AGENTSTATE_REQUEUE_AFTER_SECONDS
        cursor.execute(DUE_TENANTS_SQL, {"stale": stale_after, "tenants": TENANTS_PER_PASS})
        woken: list[tuple] = []
        stale: list[tuple] = []
        for tenant_id, timers, queued in cursor.fetchall():
            if timers:
                cursor.execute(WAKE_TIMERS_SQL, {"tenant": tenant_id})
                woken += cursor.fetchall()
            if queued:
                cursor.execute(STALE_QUEUED_SQL, {"tenant": tenant_id, "stale": stale_after})
                stale += cursor.fetchall()
        counts = {"lost_leases": len(lost), "timers_woken": len(woken), "requeued": len(stale)}
        if lost or woken:
            ctx.record(**counts, runs=[str(r[0]) for r in (lost + woken)][:50])
        for run_id, tenant_id in lost:
            transaction.on_commit(
                partial(
                    queue.enqueue_run, tenant_id=tenant_id, run_id=run_id, priority=queue.URGENT
                )
            )
        for run_id, tenant_id in woken + stale:
            transaction.on_commit(partial(queue.enqueue_run, tenant_id=tenant_id, run_id=run_id))
    record_sweep("run_recovery", counts)
    return counts


def _unique(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


def _announce_lost(
    run_id, tenant_id, seq: int, worker: str, step: str, step_seq: int, attempt: int, why: str
) -> tuple:
    """Tell live pages (after commit) and the metrics that the run's worker was lost."""
    progress.publish(
        tenant_id=tenant_id,
        run_id=run_id,
        kind="run.lost",
        seq=seq,
        status="queued",
        worker=worker,
        step=step,
        step_seq=step_seq,
        attempt=attempt,
    )
    transaction.on_commit(partial(record_lost, worker=worker, early=why == "worker_gone"))
    return run_id, tenant_id


def _lost_params(dead: list[str], owners: list[str], *, quiet: float | None = None) -> dict:
    """The parameters of requeue_lost_runs.sql: the dead workers, when each lease owner was
    last seen alive (its last beat), the quiet time and the default lease."""
    seen = liveness.last_seen(owners)
    return {
        "dead": dead,
        "owners": list(seen),
        "seen": list(seen.values()),
        "quiet": settings.AGENTSTATE_LIVENESS_SECONDS if quiet is None else quiet,
        "lease": settings.AGENTSTATE_LEASE_SECONDS,
    }


def take_back_from(worker: str) -> int:
    """`worker` is known dead (the Celery parent saw its pool process die): take its runs back
    now rather than when its liveness key expires. Returns how many."""
    with system_scope("run_recovery") as ctx, connection.cursor() as cursor:
        params = _lost_params([worker], [worker], quiet=0)
        cursor.execute(TENANTS_OF_WORKER_SQL, {"worker": worker})
        lost = []
        for (tenant_id,) in cursor.fetchall():
            cursor.execute(RECOVER_LOST_SQL, {**params, "tenant": tenant_id})
            lost += [_announce_lost(*row) for row in cursor.fetchall()]
        if lost:
            ctx.record(lost_leases=len(lost), worker=worker, runs=[str(r[0]) for r in lost][:50])
        for run_id, tenant_id in lost:
            transaction.on_commit(
                partial(
                    queue.enqueue_run, tenant_id=tenant_id, run_id=run_id, priority=queue.URGENT
                )
            )
    liveness.forget(worker)
    record_sweep("run_recovery", {"lost_leases": len(lost)})
    return len(lost)


def expire_idempotency() -> int:
    """Delete idempotency records past their expiry."""
    with system_scope("idempotency_expiry") as ctx, connection.cursor() as cursor:
        cursor.execute(EXPIRE_IDEMPOTENCY_SQL)
        deleted = cursor.rowcount
        if deleted:
            ctx.record(deleted=deleted)
    record_sweep("idempotency_expiry", {"deleted": deleted})
    return deleted
