-- Sweep (system context): queue the tenant's runs whose timer is due.
UPDATE agents_run
   SET status = 'queued', not_before = clock_timestamp(), version = version + 1,
       updated_at = clock_timestamp()
 WHERE tenant_id = %(tenant)s
   AND id IN (SELECT id FROM agents_run
               WHERE tenant_id = %(tenant)s
                 AND status = 'waiting_timer' AND not_before <= clock_timestamp()
               LIMIT 500 FOR UPDATE SKIP LOCKED)
RETURNING id, tenant_id
