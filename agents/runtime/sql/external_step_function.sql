-- agentstate_langgraph_step: one step of a LangGraph thread (a task's writes and the
-- checkpoint after them) in one statement, so in autocommit one round trip with its commit.
-- Installed after every migrate (agents/runtime/external_fast.py) from this text, in which
-- {writes} and {put} stand for external_writes_put.sql and external_checkpoint_put.sql with
-- their parameters as this function's (the latter's answer read INTO the v_ variables), and
-- {event} for record_event.sql. It handles the common step only: an active,
-- unexpired integration key of the tenant, a thread with a run that this key drives, no open
-- interrupt. Anything else answers 'key' or 'slow' having written nothing, and the door
-- takes its general path (which also says why, audits, adopts, makes the run).
CREATE OR REPLACE FUNCTION agentstate_langgraph_step(
    p_tenant uuid, p_key_hash text, p_driver text, p_thread text, p_ns text,
    pw_checkpoint text, pw_task text, pw_path text, pw_idx int[], pw_channels text[],
    pw_types text[], pw_blobs bytea[],
    pp_checkpoint text, pp_parent text, pp_type text, pp_blob bytea, pp_metadata text,
    pp_channel_versions text, pp_preview text, pp_step text, pp_on text,
    pp_next_given boolean, pp_event text, pp_channels text[], pp_versions text[],
    pp_types text[], pp_blobs bytea[]
) RETURNS TABLE (
    outcome text, run_id uuid, was text, step_seq int, event_seq int, version int,
    shown_id bigint, status text, judged boolean, status_seq int
) LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    v_run uuid;
    v_session uuid;
    v_status text;
    v_error jsonb;
    v_driver text;
    pp_fast boolean;
    v_s int;
    v_e int;
    v_v int;
    v_shown bigint;
    v_st text;
    v_here boolean;
    v_status_seq int;
    pe_kind text := 'run.status';
    pe_data text;
BEGIN
    -- As tenants.scope.activate does, for this statement's transaction.
    PERFORM set_config('app.tenant_id', p_tenant::text, true),
            set_config('app.user_id', '', true), set_config('app.system_context', '', true);
    IF NOT EXISTS (
        SELECT 1 FROM tenants_apikey k
        WHERE {key_active}
    ) THEN
        RETURN QUERY SELECT 'key'::text, NULL::uuid, NULL::text, NULL::int, NULL::int,
                            NULL::int, NULL::bigint, NULL::text, NULL::boolean, NULL::int;
        RETURN;
    END IF;
    SELECT r.id, r.status, r.error, s.driver INTO v_run, v_status, v_error, v_driver
    FROM agents_run r JOIN agents_agentsession s ON s.id = r.session_id
    WHERE s.tenant_id = p_tenant AND s.agent = 'langgraph' AND s.title = p_thread
      AND r.tenant_id = s.tenant_id AND r.input -> 'checkpoint_ns' = to_jsonb(p_ns)
    ORDER BY r.id LIMIT 1 FOR UPDATE OF r, s;
    -- A thread's first checkpoint (no session yet): its session and run made here as
    -- external._session and external._run make them (driven by this key; the run, made
    -- finished, is judged by the checkpoint below). A session that exists without the run,
    -- or one a concurrent first write has just made, is left to the general path.
    IF NOT FOUND AND pp_checkpoint IS NOT NULL AND pw_checkpoint IS NULL THEN
        INSERT INTO agents_agentsession
            (tenant_id, id, user_id, agent, title, status, summary, summary_upto,
             inherited_messages, token_count, last_seq, version, driver, created_at,
             updated_at)
        VALUES (p_tenant, gen_random_uuid(), NULL, 'langgraph', p_thread, 'active', '', 0,
                0, 0, 0, 1, p_driver, now(), now())
        ON CONFLICT DO NOTHING
        RETURNING id INTO v_session;
        IF v_session IS NOT NULL THEN
            INSERT INTO agents_run
                (id, tenant_id, session_id, agent, agent_version, status, current_step,
                 step_seq, input, attempts, lease_owner, version, state_schema_version,
                 waiting_for, cancel_requested, event_seq, created_at, updated_at,
                 finished_at, resolution_note)
            VALUES (uuidv7(), p_tenant, v_session, 'langgraph', 1, 'succeeded',
                    'external', 0, jsonb_build_object('thread_id', p_thread,
                                                      'checkpoint_ns', p_ns),
                    0, '', 1, 1, '', false, 0, now(), now(), now(), '')
            RETURNING id, status INTO v_run, v_status;
            v_driver := p_driver;
            v_error := NULL;
        END IF;
    END IF;
    -- The statement judges the run's status itself only when the client sent the next
    -- nodes and the run holds no error (as external._put_params and graph_runs).
    IF v_run IS NULL OR v_driver IS DISTINCT FROM p_driver
       OR NOT (v_error IS NULL OR v_error IN ('null'::jsonb, '{}'::jsonb, '[]'::jsonb,
                                              '""'::jsonb, 'false'::jsonb, '0'::jsonb))
       OR (pp_checkpoint IS NOT NULL AND NOT pp_next_given)
       OR EXISTS (
        SELECT 1 FROM agents_graphinterrupt
        WHERE tenant_id = p_tenant AND run_id = v_run AND closed_at IS NULL
    ) THEN
        RETURN QUERY SELECT 'slow'::text, NULL::uuid, NULL::text, NULL::int, NULL::int,
                            NULL::int, NULL::bigint, NULL::text, NULL::boolean, NULL::int;
        RETURN;
    END IF;
    pp_fast := true;
    IF pw_checkpoint IS NOT NULL THEN
        {writes};
    END IF;
    IF pp_checkpoint IS NULL THEN
        RETURN QUERY SELECT 'ok'::text, v_run, v_status, NULL::int, NULL::int, NULL::int,
                            NULL::bigint, NULL::text, NULL::boolean, NULL::int;
        RETURN;
    END IF;
    {put};
    -- A checkpoint that moved the run (running on, or succeeded at the graph's end) records
    -- that as an event of its own, as the general path's progress.publish does.
    IF v_st IS DISTINCT FROM v_status AND v_st IS NOT NULL THEN
        pe_data := json_build_object('status', v_st)::text;
        {event};
    END IF;
    RETURN QUERY SELECT 'ok'::text, v_run, v_status, v_s, v_e, v_v, v_shown, v_st, v_here,
                        v_status_seq;
END
$fn$
