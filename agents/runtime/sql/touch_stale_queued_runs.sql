-- Sweep (system context): the tenant's queued runs whose queue message may have been lost
-- (broker restart, worker killed after taking the message), to be sent again. A duplicate
-- loses the claim and does nothing. %(stale)s: seconds a run may stay queued.
UPDATE agents_run
   SET updated_at = clock_timestamp()
 WHERE tenant_id = %(tenant)s
   AND id IN (SELECT id FROM agents_run
               WHERE tenant_id = %(tenant)s
                 AND status = 'queued'
                 AND greatest(coalesce(not_before, updated_at), updated_at)
                     < clock_timestamp() - make_interval(secs => %(stale)s)
               LIMIT 500 FOR UPDATE SKIP LOCKED)
RETURNING id, tenant_id
