-- Persist one step: the run update and its checkpoint, as one statement (one round trip,
-- one commit in autocommit mode). The checkpoint is also the record of the attempt that
-- produced it (attempt, worker, start, duration) and of its step.finished event (number
-- event_seq, the run's status after the step): agents_runevent_log and the attempt
-- selectors read them from here, so a step writes two rows, like the raw floor.
-- Fenced: it writes only while the run still has the version and lease owner the caller
-- claimed; zero rows back means another worker superseded the caller.
-- The lease is not renewed here (the heartbeat thread does that): a run that keeps
-- running changes no indexed column, so its UPDATE is a heap-only tuple update.
-- SECURITY INVOKER (the default): row-level security applies to the caller.
CREATE OR REPLACE FUNCTION agents_persist_step(
    p_tenant uuid, p_run uuid, p_version integer, p_worker text, p_status text,
    p_next_step text, p_seq integer, p_attempts integer, p_owner text, p_output jsonb,
    p_error jsonb, p_not_before timestamptz, p_waiting_for text, p_schema_version integer,
    p_step text, p_state jsonb, p_messages_upto integer, p_attempt integer,
    p_started_at timestamptz, p_duration_ms double precision
) RETURNS TABLE (o_status varchar, o_version integer, o_event_seq integer)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant::text, true);
    RETURN QUERY
    WITH r AS (
        UPDATE agents_run SET
            status = CASE WHEN cancel_requested AND p_status NOT IN ('succeeded', 'failed')
                          THEN 'cancelled' ELSE p_status END,
            current_step = p_next_step,
            step_seq = p_seq,
            version = version + 1,
            attempts = p_attempts,
            lease_owner = p_owner,
            lease_expires_at = CASE WHEN p_owner = '' THEN NULL ELSE lease_expires_at END,
            output = p_output,
            error = p_error,
            not_before = p_not_before,
            waiting_for = p_waiting_for,
            wake_payload = NULL,
            state_schema_version = p_schema_version,
            event_seq = event_seq + 1,
            finished_at = CASE WHEN p_status IN ('succeeded', 'failed') OR cancel_requested
                          THEN clock_timestamp() END,
            updated_at = clock_timestamp()
        WHERE id = p_run AND version = p_version AND lease_owner = p_worker
        RETURNING id, status, version, event_seq
    ), cp AS (
        INSERT INTO agents_checkpoint
            (tenant_id, run_id, seq, step, next_step, state, schema_version, messages_upto,
             created_at, attempt, worker, started_at, duration_ms, event_seq, status)
        SELECT p_tenant, r.id, p_seq, p_step, p_next_step, p_state, p_schema_version,
               p_messages_upto, clock_timestamp(), p_attempt, p_worker, p_started_at,
               p_duration_ms, r.event_seq, r.status
        FROM r
    )
    SELECT r.status, r.version, r.event_seq FROM r;
END
$fn$;
