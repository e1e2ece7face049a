-- Save a task's pending writes of an external (LangGraph) thread in one statement: a regular
-- write (idx >= 0) is kept as first written, the special ones (errors, interrupts: idx < 0)
-- are replaced, as LangGraph's savers do. The caller sends each idx once.
INSERT INTO agents_externalwrite
    (tenant_id, run_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx,
     channel, type, blob)
SELECT %(tenant)s, %(run)s, %(thread)s, %(ns)s, %(checkpoint)s, %(task)s, %(path)s, w.idx,
       w.channel, w.type, w.blob
FROM unnest(%(idx)s::int[], %(channels)s::text[], %(types)s::text[], %(blobs)s::bytea[])
    AS w(idx, channel, type, blob)
ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE
SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob,
    task_path = EXCLUDED.task_path
WHERE agents_externalwrite.idx < 0
