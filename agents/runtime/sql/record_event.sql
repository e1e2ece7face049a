-- Store a progress event of a run with the run's next number (agents_run.event_seq + 1),
-- in the caller's transaction. No row back: the run is not visible in this tenant context.
WITH r AS (
    UPDATE agents_run SET event_seq = event_seq + 1 WHERE id = %(run)s AND tenant_id = %(tenant)s
    RETURNING id, tenant_id, event_seq
)
INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
SELECT tenant_id, id, event_seq, %(kind)s, %(data)s::jsonb, clock_timestamp() FROM r
RETURNING seq
