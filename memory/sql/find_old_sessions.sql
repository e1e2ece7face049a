-- Retention (system context, one batch of one tenant): conversations past the tenant's
-- retention with no unfinished run; the ORM deletes them with their cascade.
SELECT s.id, s.tenant_id FROM agents_agentsession s
  JOIN tenants_tenant t ON t.id = s.tenant_id
 WHERE s.tenant_id = %(tenant)s
   AND t.conversation_retention_days IS NOT NULL
   AND s.updated_at < %(now)s - make_interval(days => t.conversation_retention_days)
   AND NOT EXISTS (SELECT 1 FROM agents_run r
                    WHERE r.session_id = s.id AND r.tenant_id = %(tenant)s
                      AND r.status NOT IN ('succeeded', 'failed', 'cancelled'))
 LIMIT %(batch)s
