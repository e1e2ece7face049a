-- Extend a run's lease, only while the caller's worker still owns it. The version is the one
-- the caller knows or a later one: a renewal that waits behind its own step's commit (which
-- bumps the version) still extends the lease; a run taken back bumps the version and clears
-- the owner, one taken over names another owner.
SELECT set_config('app.tenant_id', %(tenant)s, true);
UPDATE agents_run SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
 WHERE id = %(run)s AND tenant_id = %(tenant)s AND version >= %(version)s AND lease_owner = %(worker)s
