-- Extend a run's lease, only while the run still has the version and owner the caller knows.
SELECT set_config('app.tenant_id', %(tenant)s, true);
UPDATE agents_run SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
 WHERE id = %(run)s AND version = %(version)s AND lease_owner = %(worker)s
