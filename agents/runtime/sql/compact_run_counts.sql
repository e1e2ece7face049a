-- Fold one tenant's run-count rows (agents_runcount: +1/-1 per change) into one row per
-- status; a tenant gone has its rows dropped. Rows written meanwhile are not in this
-- statement's snapshot and stay as they are, so every sum is the same before and after.
-- Answers the number of rows folded away.
WITH gone AS (
    DELETE FROM agents_runcount c
     WHERE c.tenant_id = %(tenant)s
    RETURNING c.tenant_id, c.status, c.n
), kept AS (
    INSERT INTO agents_runcount (tenant_id, status, n)
    SELECT g.tenant_id, g.status, sum(g.n) FROM gone g
    WHERE EXISTS (SELECT 1 FROM tenants_tenant t WHERE t.id = %(tenant)s)
    GROUP BY g.tenant_id, g.status
    HAVING sum(g.n) <> 0
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) - (SELECT count(*) FROM kept)
