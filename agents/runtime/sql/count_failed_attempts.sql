-- Attempts at one step that failed (retrying or failed), for the step's retry budget: an
-- attempt abandoned because a service went away records nothing and is not counted.
SELECT count(*) FROM agents_stepattempt
 WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND seq = %(seq)s AND outcome IN ('retrying', 'failed')
