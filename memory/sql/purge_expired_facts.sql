-- Retention (system context, one batch of one tenant): whole lineages whose live version
-- expired; history goes with the fact it explains.
WITH doomed AS (
    SELECT lineage FROM memory_memoryfact
     WHERE tenant_id = %(tenant)s AND expires_at < %(now)s AND valid_until IS NULL
     ORDER BY expires_at
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
)
DELETE FROM memory_memoryfact f USING doomed d
 WHERE f.tenant_id = %(tenant)s AND f.lineage = d.lineage
RETURNING f.tenant_id
