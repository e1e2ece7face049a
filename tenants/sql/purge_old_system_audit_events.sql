-- Retention (system context, one batch): the oldest audit events of no tenant (the system
-- context's own, sign-in attempts of unknown people) older than %(cutoff)s
-- (AUDIT_SYSTEM_RETENTION_DAYS), found as a tenant's are (purge_old_audit_events.sql).
DELETE FROM tenants_auditevent
 WHERE created_at < %(cutoff)s
   AND id IN (
    SELECT e.id
      FROM (SELECT id, created_at FROM tenants_auditevent
             WHERE tenant_id IS NULL
             ORDER BY id
             LIMIT %(batch)s) e
     WHERE e.created_at < %(cutoff)s)
RETURNING id
