-- A step failed: update the run (retry later or failed), record the attempt and the
-- step.failed event. Fenced on version and lease owner; sent after set_tenant.sql.
WITH r AS (
    UPDATE agents_run SET
        status = %(status)s,
        version = version + 1,
        lease_owner = '',
        lease_expires_at = NULL,
        not_before = %(not_before)s,
        error = %(error)s::jsonb,
        finished_at = CASE WHEN %(status)s = 'failed' THEN clock_timestamp() END,
        updated_at = clock_timestamp(),
        event_seq = event_seq + 1
    WHERE id = %(run)s AND tenant_id = %(tenant)s AND version = %(version)s AND lease_owner = %(worker)s
    RETURNING id, status, version, event_seq
), att AS (
    INSERT INTO agents_stepattempt
        (tenant_id, run_id, seq, attempt, step, worker, started_at, ended_at, outcome,
         error_class, error_code, message, traceback, duration_ms)
    SELECT %(tenant)s, r.id, %(seq)s, %(attempt)s, %(step)s, %(worker)s, %(started_at)s,
           clock_timestamp(), %(outcome)s, %(error_class)s, %(error_code)s, %(message)s,
           %(traceback)s, %(duration_ms)s
    FROM r
), ev AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT %(tenant)s, r.id, r.event_seq, 'step.failed',
           jsonb_build_object('step', %(step)s::text, 'step_seq', %(seq)s::int,
                              'attempt', %(attempt)s::int, 'status', r.status,
                              'outcome', %(outcome)s::text,
                              'error', jsonb_build_object('code', %(error_code)s::text,
                                                          'message', %(message)s::text)),
           clock_timestamp()
    FROM r
)
SELECT status, version, event_seq FROM r
