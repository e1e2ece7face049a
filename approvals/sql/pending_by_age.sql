-- The inbox's chart for a reader who sees the whole tenant: its pending requests by how long
-- they have waited (the bucket: how many of %(bounds)s seconds they have waited at least) and
-- whether their deadline has passed. One statement the pending index answers; built with the
-- ORM, its fourteen filtered counts cost more to compile than to run
-- (approvals/selectors.py _pending_by_age, the same rules for a member's own requests).
SELECT width_bucket(extract(epoch FROM %(now)s - requested_at)::float8, %(bounds)s::float8[]),
       due_sort <= %(now)s,
       count(*)
  FROM approvals_approvalrequest
 WHERE tenant_id = %(tenant)s AND status = %(pending)s AND due_sort IS NOT NULL
 GROUP BY 1, 2
