-- Take a run's lease if it is runnable and free (or its lease expired), record the
-- step.started event, and return the run joined to its latest checkpoint.
-- v2: the event names the worker, and a run the recovery sweep took back from a lost worker
-- (lost_at set) is recorded as recovered: the event says so and when it was lost, lost_at
-- is cleared, and the claim returns it (the engine measures the recovery's latency).
-- v3: that claim also sets recovered_at (the pages' "Recovered automatically").
-- v4: every statement names the tenant (the run's key is (id, tenant_id),
-- tenants/distribution.py): distributed by tenant, each goes to the tenant's shard alone.
-- SECURITY INVOKER (the default): row-level security applies to the caller; the function
-- sets the tenant for the statement's transaction first. PL/pgSQL caches the plan per
-- connection, so a claim costs one round trip and no re-planning.
DROP FUNCTION IF EXISTS agents_claim_run(uuid, uuid, text, double precision);
CREATE FUNCTION agents_claim_run(
    p_tenant uuid, p_run uuid, p_worker text, p_lease double precision
) RETURNS TABLE (
    o_id uuid, o_agent varchar, o_agent_version integer, o_current_step varchar,
    o_step_seq integer, o_version integer, o_attempts integer, o_input jsonb,
    o_wake_payload jsonb, o_session_id uuid, o_state_schema_version integer,
    o_cancel_requested boolean, o_state jsonb, o_schema_version integer,
    o_messages_upto integer, o_event_seq integer, o_lost_at timestamptz
) LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $fn$
BEGIN
    PERFORM set_config('app.tenant_id', p_tenant::text, true);
    RETURN QUERY
    WITH before AS (
        -- lost_at as it was before this claim clears it (an UPDATE returns only new values)
        SELECT r.id, r.lost_at FROM agents_run r WHERE r.id = p_run AND r.tenant_id = p_tenant
    ), claimed AS (
        UPDATE agents_run SET
            status = 'running',
            lease_owner = p_worker,
            lease_expires_at = clock_timestamp() + make_interval(secs => p_lease),
            version = version + 1,
            attempts = attempts + 1,
            event_seq = event_seq + 1,
            started_at = coalesce(started_at, clock_timestamp()),
            updated_at = clock_timestamp(),
            -- SET reads the row as it was: lost_at before this claim clears it
            recovered_at = CASE WHEN lost_at IS NULL THEN recovered_at
                                ELSE clock_timestamp() END,
            lost_at = NULL
        WHERE id = p_run AND tenant_id = p_tenant
          AND (
            (status = 'queued' AND (not_before IS NULL OR not_before <= clock_timestamp()))
            OR (status = 'running' AND lease_expires_at < clock_timestamp())
            -- our own lease: this process resumes after losing its database connection
            OR (status = 'running' AND lease_owner = p_worker)
          )
        RETURNING id, tenant_id, agent, agent_version, current_step, step_seq, version,
                  attempts, input, wake_payload, session_id, state_schema_version,
                  cancel_requested, event_seq
    ), ev AS (
        INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
        SELECT c.tenant_id, c.id, c.event_seq, 'step.started',
               jsonb_build_object('step', c.current_step, 'step_seq', c.step_seq + 1,
                                  'attempt', c.attempts, 'status', 'running',
                                  'worker', p_worker)
               || CASE WHEN b.lost_at IS NULL THEN '{}'::jsonb
                       ELSE jsonb_build_object('recovered', true, 'lost_at', b.lost_at) END,
               clock_timestamp()
        FROM claimed c JOIN before b ON b.id = c.id
    )
    SELECT c.id, c.agent, c.agent_version, c.current_step, c.step_seq, c.version, c.attempts,
           c.input, c.wake_payload, c.session_id, c.state_schema_version, c.cancel_requested,
           cp.state, cp.schema_version, cp.messages_upto, c.event_seq, b.lost_at
    FROM claimed c
    JOIN before b ON b.id = c.id
    LEFT JOIN agents_checkpoint cp
           ON cp.run_id = c.id AND cp.seq = c.step_seq AND cp.tenant_id = p_tenant;
END
$fn$;
