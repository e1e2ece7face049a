-- Retention (system context, one batch): whole lineages whose live version expired;
-- history goes with the fact it explains.
WITH doomed AS (
    SELECT lineage FROM memory_memoryfact
     WHERE expires_at < %(now)s AND valid_until IS NULL
     ORDER BY expires_at
     LIMIT %(batch)s
       FOR UPDATE SKIP LOCKED
)
DELETE FROM memory_memoryfact f USING doomed d
 WHERE f.lineage = d.lineage
RETURNING f.tenant_id
