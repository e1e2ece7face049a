"""Cross-tenant sweeps run by Celery beat, each inside a named system context."""

from __future__ import annotations

import logging
from functools import partial

from django.conf import settings
from django.db import connection, transaction

from agents.runtime import queue
from agents.runtime.metrics import record_sweep
from tenants.scope import system_scope

logger = logging.getLogger(__name__)

RECOVER_EXPIRED_SQL = """
WITH lost AS (
    SELECT id, tenant_id, current_step, step_seq, attempts, lease_owner, lease_expires_at
      FROM agents_run
     WHERE status = 'running' AND lease_expires_at < clock_timestamp()
     ORDER BY lease_expires_at
     LIMIT 500
       FOR UPDATE SKIP LOCKED
), requeued AS (
    UPDATE agents_run r
       SET status = 'queued', lease_owner = '', lease_expires_at = NULL,
           version = r.version + 1, updated_at = clock_timestamp(),
           -- when it was queued again (stuck detection measures the wait from here)
           not_before = clock_timestamp()
      FROM lost
     WHERE r.id = lost.id
    RETURNING r.id
), noted AS (
    INSERT INTO agents_stepattempt
        (tenant_id, run_id, seq, attempt, step, worker, started_at, ended_at, outcome,
         error_class, error_code, message, traceback, duration_ms)
    SELECT tenant_id, id, step_seq + 1, attempts, current_step, lease_owner,
           lease_expires_at, clock_timestamp(), 'lost', '', 'worker_lost',
           'The worker stopped answering while it held the run (lease expired).', '', 0
      FROM lost
)
SELECT id, tenant_id FROM lost
"""

WAKE_TIMERS_SQL = """
UPDATE agents_run
   SET status = 'queued', not_before = clock_timestamp(), version = version + 1,
       updated_at = clock_timestamp()
 WHERE id IN (SELECT id FROM agents_run
               WHERE status = 'waiting_timer' AND not_before <= clock_timestamp()
               LIMIT 500 FOR UPDATE SKIP LOCKED)
RETURNING id, tenant_id
"""

# Queued runs whose queue message may have been lost (broker restart, worker killed after
# taking the message): send another. A duplicate loses the claim and does nothing.
STALE_QUEUED_SQL = """
UPDATE agents_run
   SET updated_at = clock_timestamp()
 WHERE id IN (SELECT id FROM agents_run
               WHERE status = 'queued'
                 AND greatest(coalesce(not_before, updated_at), updated_at)
                     < clock_timestamp() - make_interval(secs => %s)
               LIMIT 500 FOR UPDATE SKIP LOCKED)
RETURNING id, tenant_id
"""


def recover() -> dict[str, int]:
    """Requeue runs of dead workers, wake due timers, re-send stale queue messages."""
    with system_scope("run_recovery") as ctx, connection.cursor() as cursor:
        cursor.execute(RECOVER_EXPIRED_SQL)
        lost = cursor.fetchall()
        cursor.execute(WAKE_TIMERS_SQL)
        woken = cursor.fetchall()
        cursor.execute(STALE_QUEUED_SQL, [settings.AGENTSTATE_REQUEUE_AFTER_SECONDS])
        stale = cursor.fetchall()
        counts = {"lost_leases": len(lost), "timers_woken": len(woken), "requeued": len(stale)}
        if lost or woken:
            ctx.record(**counts, runs=[str(r[0]) for r in (lost + woken)][:50])
        for run_id, tenant_id in lost + woken + stale:
            transaction.on_commit(partial(queue.enqueue_run, tenant_id=tenant_id, run_id=run_id))
    record_sweep("run_recovery", counts)
    return counts


def expire_idempotency() -> int:
    """Delete idempotency records past their expiry."""
    with system_scope("idempotency_expiry") as ctx, connection.cursor() as cursor:
        cursor.execute("DELETE FROM agents_idempotencyrecord WHERE expires_at < clock_timestamp()")
        deleted = cursor.rowcount
        if deleted:
            ctx.record(deleted=deleted)
    record_sweep("idempotency_expiry", {"deleted": deleted})
    return deleted
