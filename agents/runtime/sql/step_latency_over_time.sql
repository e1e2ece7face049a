-- Step time per bucket (p50, p95, steps) of the successful steps of a tenant's runs created
-- since %(since)s (a member's own runs only, when %(user)s is set), bucketed by when each step
-- started in time zone %(tz)s; `runs` is how many runs the period holds. A busy tenant has
-- more runs than a chart needs: above %(sample)s runs, a uniform sample of about that many is
-- read (by a hash of the run id), so the statement's cost stays bounded. A successful attempt
-- is recorded on the checkpoint it wrote (one a graph saved elsewhere has no duration: it is
-- not timed here); each sampled run's checkpoints come through the
-- (run, seq) index: the LIMIT keeps the planner from flattening the lateral subquery into a
-- scan of the whole checkpoint table.
WITH recent AS (
    SELECT r.id, count(*) OVER () AS n
      FROM agents_run r
     WHERE r.tenant_id = %(tenant)s
       AND r.created_at >= %(since)s
       AND (%(user)s::integer IS NULL
            OR r.created_by_id = %(user)s::integer
            OR r.session_id IN (SELECT s.id FROM agents_agentsession s
                                 WHERE s.tenant_id = %(tenant)s AND s.user_id = %(user)s::integer))
), picked AS (
    SELECT id, n FROM recent
     WHERE n <= %(sample)s OR (hashtext(id::text) & 65535) < 65536.0 * %(sample)s / n
)
SELECT date_trunc(%(bucket)s, c.started_at AT TIME ZONE %(tz)s) AT TIME ZONE %(tz)s AS bucket,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY c.duration_ms) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY c.duration_ms) AS p95,
       count(*) AS steps,
       max(p.n) AS runs
  FROM picked p
 CROSS JOIN LATERAL (
       SELECT c.started_at, c.duration_ms
         FROM agents_checkpoint c
        WHERE c.run_id = p.id AND c.tenant_id = %(tenant)s
          AND c.attempt IS NOT NULL AND c.duration_ms IS NOT NULL
          AND c.started_at >= %(since)s
        LIMIT 100000
       ) c
 GROUP BY 1
 ORDER BY 1
