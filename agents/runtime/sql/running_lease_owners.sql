-- Sweep (system context, a read without locks): each tenant's workers holding running runs,
-- and whether any of their leases expired. The workers' liveness is checked next, and the
-- tenants with a run to take back are swept one by one (requeue_lost_runs.sql): a statement
-- that locks rows stays within one tenant, so under Citus it runs on one shard.
SELECT tenant_id, lease_owner, bool_or(lease_expires_at < clock_timestamp())
  FROM agents_run
 WHERE status = 'running'
 GROUP BY tenant_id, lease_owner
