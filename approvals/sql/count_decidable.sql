-- The nav badge: pending requests the principal may decide. The rules of
-- approvals.policies.decidable_by as one statement (tests/approvals/test_badge_count.py).
-- Counted up to %(limit)s (NULL: all): a badge says "99+", and reading 50,000 pending
-- requests on every page of a large tenant cost 10-17 ms.
SELECT count(*) FROM (
SELECT 1 FROM approvals_approvalrequest r
WHERE r.tenant_id = %(tenant)s AND r.status = %(pending)s
  AND (%(admin)s OR r.approver_role = %(manager)s)
  AND (r.approver_group_id IS NULL
       OR r.approver_group_id IN (SELECT m.group_id FROM approvals_approvergroupmember m
                                  WHERE m.tenant_id = %(tenant)s AND m.user_id = %(user)s)
       OR (%(admin)s AND r.escalated_at IS NOT NULL))
  AND NOT (r.four_eyes AND r.started_by_id IS NOT DISTINCT FROM %(user)s)
LIMIT %(limit)s) found
