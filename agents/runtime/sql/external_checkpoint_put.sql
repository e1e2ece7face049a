-- Save one checkpoint of an external (LangGraph) thread in one statement, in the caller's
-- transaction (its run row already locked): the channel values it introduced, and either a
-- new checkpoint (the run's next seq, its readable Checkpoint, its step.finished event) or,
-- for an id saved before, the same rows replaced. One row back: the new step's seq, event
-- seq, run version, readable Checkpoint's id, the run's status and whether it was judged
-- here; for a replaced one, only that id.
WITH existing AS (
    SELECT id FROM agents_externalcheckpoint
    WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s AND checkpoint_ns = %(ns)s
      AND checkpoint_id = %(checkpoint)s
), judged AS (
    -- The run's status follows the graph here, in this statement, when nothing else can
    -- bear on it (agents/runtime/graph_runs.py): the client sent the next nodes, the run
    -- holds no error and no interrupt of it is open. Otherwise graph_runs judges after.
    SELECT %(fast)s::boolean AND NOT EXISTS (
        SELECT 1 FROM agents_graphinterrupt
        WHERE tenant_id = %(tenant)s AND run_id = %(run)s AND closed_at IS NULL
    ) AS here
), blobs AS (
    INSERT INTO agents_externalblob
        (tenant_id, run_id, thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT %(tenant)s, %(run)s, %(thread)s, %(ns)s, b.channel, b.version, b.type, b.blob
    FROM unnest(%(channels)s::text[], %(versions)s::text[], %(types)s::text[],
                %(blobs)s::bytea[]) AS b(channel, version, type, blob)
    -- a version's value never changes
    ON CONFLICT (tenant_id, thread_id, checkpoint_ns, channel, version) DO NOTHING
), replaced AS (
    UPDATE agents_externalcheckpoint x
    SET parent_checkpoint_id = %(parent)s, type = %(type)s, blob = %(blob)s,
        metadata = %(metadata)s::jsonb, channel_versions = %(channel_versions)s::jsonb
    FROM existing WHERE x.id = existing.id
    RETURNING x.shown_as_id
), shown_again AS (
    UPDATE agents_checkpoint c SET state = %(preview)s::jsonb, step = %(step)s
    FROM replaced WHERE c.id = replaced.shown_as_id AND c.tenant_id = %(tenant)s
), r AS (
    UPDATE agents_run
    SET step_seq = step_seq + 1, event_seq = event_seq + 1, version = version + 1,
        updated_at = clock_timestamp(), started_at = COALESCE(started_at, created_at),
        -- judged here: running on its next nodes, or succeeded at the graph's end
        current_step = CASE WHEN j.here AND %(on)s <> '' THEN left(%(on)s, 100)
                            ELSE %(step)s END,
        status = CASE WHEN NOT j.here THEN status
                      WHEN %(on)s <> '' THEN 'running' ELSE 'succeeded' END,
        waiting_for = CASE WHEN j.here THEN '' ELSE waiting_for END,
        finished_at = CASE WHEN j.here AND %(on)s <> '' THEN NULL ELSE clock_timestamp() END
    FROM judged j
    WHERE id = %(run)s AND tenant_id = %(tenant)s AND NOT EXISTS (SELECT 1 FROM existing)
    RETURNING id, tenant_id, step_seq, event_seq, version, status, j.here
), shown AS (
    INSERT INTO agents_checkpoint
        (tenant_id, run_id, seq, step, next_step, state, schema_version, messages_upto,
         created_at, attempt, worker, started_at, event_seq, status)
    -- its node ran elsewhere: no attempt or time was measured here
    SELECT tenant_id, id, step_seq, %(step)s, left(%(on)s, 100), %(preview)s::jsonb, 1, 0,
           clock_timestamp(), NULL, '', NULL, event_seq, 'succeeded'
    FROM r
    RETURNING id, run_id
), saved AS (
    INSERT INTO agents_externalcheckpoint
        (tenant_id, shown_as_id, run_id, thread_id, checkpoint_ns, checkpoint_id,
         parent_checkpoint_id, type, blob, metadata, channel_versions, created_at)
    SELECT %(tenant)s, shown.id, shown.run_id, %(thread)s, %(ns)s, %(checkpoint)s,
           %(parent)s, %(type)s, %(blob)s, %(metadata)s::jsonb, %(channel_versions)s::jsonb,
           clock_timestamp()
    FROM shown
), event AS (
    INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
    SELECT tenant_id, id, event_seq, 'step.finished',
           -- the run's status after the step, as the engine's step.finished says it
           %(event)s::jsonb || jsonb_build_object('step_seq', step_seq, 'status', status),
           clock_timestamp()
    FROM r
)
SELECT * FROM (
    SELECT r.step_seq, r.event_seq, r.version, shown.id, r.status, r.here FROM r, shown
    UNION ALL
    SELECT NULL, NULL, NULL, shown_as_id, NULL, false FROM replaced
) AS answer
