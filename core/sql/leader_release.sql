-- Give the lease up at once (a clean shutdown): a standby takes it at its next try.
UPDATE core_leaderlease SET expires_at = clock_timestamp()
 WHERE name = %(name)s AND holder = %(holder)s
