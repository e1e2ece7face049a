-- Persist one step (v4): as v3, every statement naming the tenant (the run's key is (id,
-- tenant_id), tenants/distribution.py: distributed by tenant, each goes to one shard), and
-- the checkpoint also stores what the step appended to the
-- run's logs (`p_appended`, {key: [items]}, NULL when nothing: agents/runtime/engine/
-- step_context.py `ctx.append`). A log is stored once, a piece in the checkpoint of the step
-- that appended it, instead of being copied into every checkpoint's state.
-- v3: the run update and its checkpoint as one statement, fenced on the version and lease
-- owner the caller claimed (zero rows back: superseded); a run that goes on running takes a
-- path whose UPDATE does not name `status`, so the row triggers declared `UPDATE OF status`
-- are not even considered.
-- SECURITY INVOKER (the default): row-level security applies to the caller.
CREATE OR REPLACE FUNCTION agents_persist_step(
    p_tenant uuid, p_run uuid, p_version integer, p_worker text, p_status text,
    p_next_step text, p_seq integer, p_attempts integer, p_owner text, p_output jsonb,
    p_error jsonb, p_not_before timestamptz, p_waiting_for text, p_schema_version integer,
    p_step text, p_state jsonb, p_messages_upto integer, p_attempt integer,
    p_started_at timestamptz, p_duration_ms double precision, p_appended jsonb
) RETURNS TABLE (o_status varchar, o_version integer, o_event_seq integer)
LANGUAGE plpgsql VOLATILE AS $fn$
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant::text, true);
    IF p_status = 'running' THEN
        -- The run goes on (the common step): its status stays 'running', so the UPDATE names
        -- no status and fires none of the triggers on it (run counts, queued_at). A cancel
        -- asked meanwhile matches nothing here and takes the full statement below.
        RETURN QUERY
        WITH r AS (
            UPDATE agents_run SET
                current_step = p_next_step,
                step_seq = p_seq,
                version = version + 1,
                attempts = p_attempts,
                lease_owner = p_owner,
                output = p_output,
                error = p_error,
                not_before = p_not_before,
                waiting_for = p_waiting_for,
                wake_payload = NULL,
                state_schema_version = p_schema_version,
                event_seq = event_seq + 1,
                finished_at = NULL,
                updated_at = clock_timestamp()
            WHERE id = p_run AND tenant_id = p_tenant AND version = p_version
              AND lease_owner = p_worker
              AND status = 'running' AND p_owner <> '' AND NOT cancel_requested
            RETURNING id, status, version, event_seq
        ), cp AS (
            INSERT INTO agents_checkpoint
                (tenant_id, run_id, seq, step, next_step, state, schema_version, messages_upto,
                 created_at, attempt, worker, started_at, duration_ms, event_seq, status,
                 appended)
            SELECT p_tenant, r.id, p_seq, p_step, p_next_step, p_state, p_schema_version,
                   p_messages_upto, clock_timestamp(), p_attempt, p_worker, p_started_at,
                   p_duration_ms, r.event_seq, r.status, p_appended
            FROM r
        )
        SELECT r.status, r.version, r.event_seq FROM r;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
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
        WHERE id = p_run AND tenant_id = p_tenant AND version = p_version
              AND lease_owner = p_worker
        RETURNING id, status, version, event_seq
    ), cp AS (
        INSERT INTO agents_checkpoint
            (tenant_id, run_id, seq, step, next_step, state, schema_version, messages_upto,
             created_at, attempt, worker, started_at, duration_ms, event_seq, status,
             appended)
        SELECT p_tenant, r.id, p_seq, p_step, p_next_step, p_state, p_schema_version,
               p_messages_upto, clock_timestamp(), p_attempt, p_worker, p_started_at,
               p_duration_ms, r.event_seq, r.status, p_appended
        FROM r
    )
    SELECT r.status, r.version, r.event_seq FROM r;
END
$fn$;
