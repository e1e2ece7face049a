-- The demo payment provider: make a refund once per Idempotency-Key, count the requests.
INSERT INTO agents_demorefund (idempotency_key, customer, amount_cents, requests, created_at)
VALUES (%s, %s, %s, 1, now())
ON CONFLICT (idempotency_key) DO UPDATE SET requests = agents_demorefund.requests + 1
RETURNING id, amount_cents, requests
