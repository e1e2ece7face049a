-- Retention (system context, one batch of one tenant): the tenant's oldest audit events that
-- are older than it keeps them (audit_retention_days). Ids grow with time, so its old events
-- are the start of its range of the (tenant, id) index: the batch reads only that start, and
-- once it meets an event inside the window the sweep stops for the tenant (a tenant with
-- nothing to forget costs one short index read). Parameters: tenant, cutoff, batch. (The
-- created_at condition spares the months that cannot hold such events: the log is
-- partitioned by month, core/partitions.py.)
DELETE FROM tenants_auditevent
 WHERE created_at < %(cutoff)s
   AND id IN (
    SELECT e.id
      FROM (SELECT id, created_at FROM tenants_auditevent
             WHERE tenant_id = %(tenant)s
             ORDER BY id
             LIMIT %(batch)s) e
     WHERE e.created_at < %(cutoff)s)
RETURNING id
