-- Retention (system context, one batch): runs started without a conversation (through the
-- API) that finished longer ago than their tenant keeps conversations: they are their own
-- conversation, and the ORM deletes them with their checkpoints, events and attempts. Each
-- tenant's runs are found by the (tenant, status, created_at) index: a run created after the
-- cutoff cannot have finished before it.
SELECT r.id, r.tenant_id
  FROM tenants_tenant t
 CROSS JOIN LATERAL (
        SELECT id, tenant_id FROM agents_run
         WHERE tenant_id = t.id
           AND status IN ('succeeded', 'failed', 'cancelled')
           AND created_at < %(now)s - make_interval(days => t.conversation_retention_days)
           AND finished_at < %(now)s - make_interval(days => t.conversation_retention_days)
           AND session_id IS NULL
         LIMIT %(batch)s) r
 WHERE t.conversation_retention_days IS NOT NULL
 LIMIT %(batch)s
