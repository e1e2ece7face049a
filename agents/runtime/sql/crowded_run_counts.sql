-- Sweep (system context, a read without locks): the tenants with more than %(rows)s
-- run-count rows, or gone (their rows are dropped), at most %(tenants)s; each is then
-- compacted on its own (compact_run_counts.sql).
SELECT c.tenant_id FROM agents_runcount c
 GROUP BY c.tenant_id
HAVING count(*) > %(rows)s
    OR NOT EXISTS (SELECT 1 FROM tenants_tenant t WHERE t.id = c.tenant_id)
 LIMIT %(tenants)s
