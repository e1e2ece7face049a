-- Retention (system context, one batch): old versions whose own retention ended while the
-- live version lives on.
DELETE FROM memory_memoryfact
 WHERE id IN (SELECT id FROM memory_memoryfact
               WHERE expires_at < %(now)s AND valid_until IS NOT NULL
               LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
RETURNING tenant_id
