-- Retention (system context, one batch of one tenant): old versions whose own retention
-- ended while the live version lives on.
DELETE FROM memory_memoryfact
 WHERE tenant_id = %(tenant)s
   AND id IN (SELECT id FROM memory_memoryfact
               WHERE tenant_id = %(tenant)s AND expires_at < %(now)s AND valid_until IS NOT NULL
               LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING tenant_id
