-- The engine honours a cancel request: the run becomes cancelled, with its run.status event.
-- Fenced on version and lease owner; sent after set_tenant.sql.
WITH r AS (
    UPDATE agents_run SET
        status = 'cancelled', version = version + 1, lease_owner = '', lease_expires_at = NULL,
        finished_at = clock_timestamp(), updated_at = clock_timestamp(),
        event_seq = event_seq + 1
    WHERE id = %(run)s AND tenant_id = %(tenant)s AND version = %(version)s AND lease_owner = %(worker)s
    RETURNING id, tenant_id, status, version, event_seq
), ev AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT tenant_id, id, event_seq, 'run.status', jsonb_build_object('status', status),
           clock_timestamp()
    FROM r
)
SELECT status, version, event_seq FROM r
