-- Sweep (system context, a read without locks): the tenants whose running runs %(worker)s
-- holds; each is then swept on its own (requeue_lost_runs.sql).
SELECT DISTINCT tenant_id FROM agents_run WHERE status = 'running' AND lease_owner = %(worker)s
