-- Take an Idempotency-Key for a tenant. No row back: another request holds the key.
INSERT INTO agents_idempotencyrecord (tenant_id, key, fingerprint, status, created_at, expires_at)
VALUES (%s, %s, %s, 'started', %s, %s)
ON CONFLICT (tenant_id, key) DO NOTHING
RETURNING id
