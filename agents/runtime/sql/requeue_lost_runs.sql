-- Sweep (system context): requeue running runs whose lease expired (the worker is gone),
-- and record each lost attempt.
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
