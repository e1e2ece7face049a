-- Fold each tenant's run-count rows (agents_runcount: +1/-1 per change) into one row per
-- status, for the tenants with more than %(rows)s rows or gone (their rows are dropped).
-- Rows written meanwhile are not in this statement's snapshot and stay as they are, so
-- every sum is the same before and after. Answers the number of rows folded away.
WITH crowded AS (
    SELECT c.tenant_id FROM agents_runcount c
    GROUP BY c.tenant_id
    HAVING count(*) > %(rows)s
        OR NOT EXISTS (SELECT 1 FROM tenants_tenant t WHERE t.id = c.tenant_id)
    LIMIT %(tenants)s
), gone AS (
    DELETE FROM agents_runcount c USING crowded
    WHERE c.tenant_id = crowded.tenant_id
    RETURNING c.tenant_id, c.status, c.n
), kept AS (
    INSERT INTO agents_runcount (tenant_id, status, n)
    SELECT g.tenant_id, g.status, sum(g.n) FROM gone g
    WHERE EXISTS (SELECT 1 FROM tenants_tenant t WHERE t.id = g.tenant_id)
    GROUP BY g.tenant_id, g.status
    HAVING sum(g.n) <> 0
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone) - (SELECT count(*) FROM kept)
