-- agentstate_langgraph_read: one checkpoint of a LangGraph thread (the saver's get_tuple: the
-- thread's latest in the namespace, or the one named), with the channel values it names and
-- its pending writes, as the JSON body `GET langgraph/checkpoints` answers (bytes as base64),
-- in one statement. Installed after every migrate (agents/runtime/external_fast.py). It
-- answers NULL unless the key is an active, unexpired integration key of the tenant with the
-- `read` scope: the door then takes its general path, which says why.
-- Same rows as agents.runtime.external.external_checkpoints(limit=1): keep the two together.
CREATE OR REPLACE FUNCTION agentstate_langgraph_read(
    p_tenant uuid, p_key_hash text, p_thread text, p_ns text, p_checkpoint text
) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    c agents_externalcheckpoint%ROWTYPE;
BEGIN
    -- As tenants.scope.activate does, for this statement's transaction.
    PERFORM set_config('app.tenant_id', p_tenant::text, true),
            set_config('app.user_id', '', true), set_config('app.system_context', '', true);
    IF NOT EXISTS (
        SELECT 1 FROM tenants_apikey k
        WHERE {key_active} AND k.scopes ? 'read'
    ) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO c FROM agents_externalcheckpoint x
    WHERE x.tenant_id = p_tenant AND x.thread_id = p_thread
      AND (p_ns IS NULL OR x.checkpoint_ns = p_ns)
      AND (p_checkpoint IS NULL OR x.checkpoint_id = p_checkpoint)
    ORDER BY x.thread_id, x.checkpoint_ns, x.checkpoint_id DESC
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN '{"results": []}';
    END IF;
    RETURN json_build_object('results', json_build_array(json_build_object(
        'thread_id', c.thread_id,
        'checkpoint_ns', c.checkpoint_ns,
        'checkpoint_id', c.checkpoint_id,
        'parent_checkpoint_id', c.parent_checkpoint_id,
        'type', c.type,
        'blob', translate(encode(c.blob, 'base64'), E'\n', ''),
        'metadata', c.metadata,
        'values', COALESCE((
            SELECT json_agg(json_build_object(
                       'channel', b.channel, 'version', b.version, 'type', b.type,
                       'blob', translate(encode(b.blob, 'base64'), E'\n', '')
                   ) ORDER BY v.n)
            FROM jsonb_each_text(c.channel_versions) WITH ORDINALITY AS v(channel, version, n)
            JOIN agents_externalblob b
              ON b.tenant_id = p_tenant AND b.thread_id = c.thread_id
             AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = v.channel
             AND b.version = v.version
        ), '[]'::json),
        'writes', COALESCE((
            SELECT json_agg(json_build_object(
                       'task_id', w.task_id, 'task_path', w.task_path, 'idx', w.idx,
                       'channel', w.channel, 'type', w.type,
                       'blob', translate(encode(w.blob, 'base64'), E'\n', '')
                   ) ORDER BY w.id)
            FROM agents_externalwrite w
            WHERE w.tenant_id = p_tenant AND w.thread_id = c.thread_id
              AND w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id
        ), '[]'::json),
        'run_id', c.run_id
    )))::text;
END
$fn$
