-- Retention (system context, one batch of one tenant): checkpoints of runs that finished
-- longer ago than the tenant keeps them. A LangGraph thread's run (agents/runtime/external.py)
-- is left to conversation retention: its checkpoints are the thread's state, not a finished
-- run's record.
DELETE FROM agents_checkpoint
 WHERE tenant_id = %(tenant)s
   AND id IN (
    SELECT c.id FROM agents_checkpoint c
      JOIN agents_run r ON r.id = c.run_id AND r.tenant_id = c.tenant_id
      JOIN tenants_tenant t ON t.id = r.tenant_id
     WHERE c.tenant_id = %(tenant)s AND r.tenant_id = %(tenant)s
       AND r.status IN ('succeeded', 'failed', 'cancelled')
       AND r.agent <> 'langgraph'
       AND t.checkpoint_retention_days IS NOT NULL
       AND r.finished_at < %(now)s - make_interval(days => t.checkpoint_retention_days)
     LIMIT %(batch)s
       FOR UPDATE OF c SKIP LOCKED)
RETURNING tenant_id
