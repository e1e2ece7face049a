-- Take the tenant's embedding turn (session advisory lock, not held by a transaction): true if
-- this connection now holds it, false if another worker does.
SELECT pg_try_advisory_lock(%s)
