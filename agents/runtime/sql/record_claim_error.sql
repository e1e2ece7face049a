-- A claim raised, and not because a service went away (a bug, a broken row): record it where
-- people look (the run's error, an attempt with the traceback, a step.failed event) and hold
-- the run back for %(backoff)s · 2^(errors so far) seconds; after %(limit)s such errors it
-- fails. Touches only a run no live worker holds. Sent after set_tenant.sql.
WITH prior AS (
    SELECT count(*)::int AS n FROM agents_stepattempt
     WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND error_code = 'claim_failed'
), r AS (
    UPDATE agents_run SET
        status = CASE WHEN prior.n + 1 >= %(limit)s THEN 'failed' ELSE 'queued' END,
        version = version + 1,
        lease_owner = '',
        lease_expires_at = NULL,
        not_before = CASE WHEN prior.n + 1 >= %(limit)s THEN NULL
                          ELSE clock_timestamp()
                               + make_interval(secs => %(backoff)s * power(2, prior.n)) END,
        error = %(error)s::jsonb,
        finished_at = CASE WHEN prior.n + 1 >= %(limit)s THEN clock_timestamp() END,
        updated_at = clock_timestamp(),
        event_seq = event_seq + 1
      FROM prior
     WHERE id = %(run)s AND tenant_id = %(tenant)s
       AND (status = 'queued'
            OR (status = 'running'
                AND (lease_expires_at < clock_timestamp() OR lease_owner = %(worker)s)))
    RETURNING id, status, event_seq, step_seq, attempts, current_step, not_before
), att AS (
    INSERT INTO agents_stepattempt
        (tenant_id, run_id, seq, attempt, step, worker, started_at, ended_at, outcome,
         error_class, error_code, message, traceback, duration_ms)
    SELECT %(tenant)s, r.id, r.step_seq + 1, r.attempts, r.current_step, %(worker)s,
           clock_timestamp(), clock_timestamp(),
           CASE r.status WHEN 'failed' THEN 'failed' ELSE 'retrying' END,
           %(error_class)s, 'claim_failed', %(message)s, %(traceback)s, 0
    FROM r
), ev AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT %(tenant)s, r.id, r.event_seq, 'step.failed',
           jsonb_build_object('step', r.current_step, 'step_seq', r.step_seq + 1,
                              'attempt', r.attempts, 'status', r.status,
                              'outcome', CASE r.status WHEN 'failed' THEN 'failed'
                                                       ELSE 'retrying' END,
                              'error', jsonb_build_object('code', 'claim_failed',
                                                          'message', %(message)s::text)),
           clock_timestamp()
    FROM r
)
SELECT status, event_seq, extract(epoch FROM not_before - clock_timestamp()) FROM r
