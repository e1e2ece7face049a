-- Sweep (system context): idempotency records past their expiry.
DELETE FROM agents_idempotencyrecord WHERE expires_at < clock_timestamp()
