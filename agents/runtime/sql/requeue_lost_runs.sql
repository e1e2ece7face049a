-- Sweep (system context): take back the tenant's running runs whose worker is gone, requeue them, and
-- record each lost attempt (how long it ran) and a run.lost event. A worker is gone when its
-- lease expired, or when it is one of %(dead)s (its liveness key vanished) and the run was
-- not claimed or written within %(quiet)s seconds (so a worker that has just started, whose
-- key may not be in Redis yet, keeps its run). lost_at: when the worker was last seen alive:
-- its last beat (%(owners)s, %(seen)s), else its last renewal of the lease (%(lease)s seconds
-- before it expired), or its last write of the run if later.
WITH dead AS (
    SELECT unnest(%(dead)s::text[]) AS owner
), seen AS (
    SELECT * FROM unnest(%(owners)s::text[], %(seen)s::timestamptz[]) AS s(owner, at)
), lost AS (
    SELECT r.id, r.tenant_id, r.current_step, r.step_seq, r.attempts, r.lease_owner,
           r.updated_at, r.event_seq,
           CASE WHEN r.lease_expires_at < clock_timestamp() THEN 'lease_expired'
                ELSE 'worker_gone' END AS why,
           least(clock_timestamp(),
                 greatest(r.updated_at,
                          coalesce(s.at,
                                   r.lease_expires_at - make_interval(secs => %(lease)s))))
               AS lost_at
      FROM agents_run r LEFT JOIN dead d ON d.owner = r.lease_owner
           LEFT JOIN seen s ON s.owner = r.lease_owner
     WHERE r.tenant_id = %(tenant)s
       AND r.status = 'running'
       AND (r.lease_expires_at < clock_timestamp()
            OR (d.owner IS NOT NULL
                AND r.updated_at < clock_timestamp() - make_interval(secs => %(quiet)s)))
     ORDER BY r.lease_expires_at
     LIMIT 500
       FOR UPDATE OF r SKIP LOCKED
), requeued AS (
    UPDATE agents_run r
       SET status = 'queued', lease_owner = '', lease_expires_at = NULL,
           version = r.version + 1, updated_at = clock_timestamp(),
           lost_at = lost.lost_at, event_seq = r.event_seq + 1,
           -- when it was queued again (stuck detection measures the wait from here)
           not_before = clock_timestamp()
      FROM lost
     WHERE r.id = lost.id AND r.tenant_id = lost.tenant_id
    RETURNING r.id
), noted AS (
    INSERT INTO agents_stepattempt
        (tenant_id, run_id, seq, attempt, step, worker, started_at, ended_at, outcome,
         error_class, error_code, message, traceback, duration_ms)
    SELECT tenant_id, id, step_seq + 1, attempts, current_step, lease_owner,
           updated_at, lost_at, 'lost', '', 'worker_lost',
           CASE why WHEN 'lease_expired'
                THEN 'The worker stopped renewing its lease while it held the run.'
                ELSE 'The worker process stopped answering while it held the run.' END,
           '', extract(epoch FROM lost_at - updated_at) * 1000
      FROM lost
), evented AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT tenant_id, id, event_seq + 1, 'run.lost',
           jsonb_build_object('status', 'queued', 'worker', lease_owner, 'why', why,
                              'step', current_step, 'step_seq', step_seq + 1,
                              'attempt', attempts, 'since', updated_at, 'lost_at', lost_at,
                              'ran_ms', round(extract(epoch FROM lost_at - updated_at) * 1000)),
           clock_timestamp()
      FROM lost
)
SELECT id, tenant_id, event_seq + 1, lease_owner, current_step, step_seq + 1, attempts, why
  FROM lost
