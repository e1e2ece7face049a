-- Sweep (system context): queued runs whose queue message may have been lost (broker
-- restart, worker killed after taking the message), to be sent again. A duplicate loses the
-- claim and does nothing. Parameter: seconds a run may stay queued.
UPDATE agents_run
   SET updated_at = clock_timestamp()
 WHERE id IN (SELECT id FROM agents_run
               WHERE status = 'queued'
                 AND greatest(coalesce(not_before, updated_at), updated_at)
                     < clock_timestamp() - make_interval(secs => %s)
               LIMIT 500 FOR UPDATE SKIP LOCKED)
RETURNING id, tenant_id
