-- Sweep (system context, a read without locks): the tenants with a timer due or a run queued
-- longer than %(stale)s seconds (its queue message may be lost), the longest-waiting first,
-- at most %(tenants)s. Each is then swept on its own (wake_due_timers.sql,
-- touch_stale_queued_runs.sql), so the statements that lock rows stay within one tenant.
SELECT tenant_id,
       bool_or(status = 'waiting_timer') AS timers,
       bool_or(status = 'queued') AS stale
  FROM agents_run
 WHERE (status = 'waiting_timer' AND not_before <= clock_timestamp())
    OR (status = 'queued'
        AND greatest(coalesce(not_before, updated_at), updated_at)
            < clock_timestamp() - make_interval(secs => %(stale)s))
 GROUP BY tenant_id
 ORDER BY min(coalesce(not_before, updated_at))
 LIMIT %(tenants)s
