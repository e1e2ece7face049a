-- Retention (system context, one batch of one tenant): runs started without a conversation
-- (through the API) that finished longer ago than the tenant keeps conversations: they are
-- their own conversation, and the ORM deletes them with their checkpoints, events and
-- attempts. Found by the (tenant, status, created_at) index: a run created after the cutoff
-- cannot have finished before it.
SELECT r.id, r.tenant_id
  FROM agents_run r JOIN tenants_tenant t ON t.id = r.tenant_id
 WHERE r.tenant_id = %(tenant)s
   AND t.conversation_retention_days IS NOT NULL
   AND r.status IN ('succeeded', 'failed', 'cancelled')
   AND r.created_at < %(now)s - make_interval(days => t.conversation_retention_days)
   AND r.finished_at < %(now)s - make_interval(days => t.conversation_retention_days)
   AND r.session_id IS NULL
 LIMIT %(batch)s
