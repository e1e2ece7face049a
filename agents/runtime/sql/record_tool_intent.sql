-- Ledger: record the intent of a tool call before it is made (or count one more send of an
-- intent already recorded). No row back: the position holds another call.
-- Sent after set_tenant.sql.
INSERT INTO agents_toolcall
    (tenant_id, run_id, seq, call_index, tool, idempotency_key, arguments, status, sends,
     created_at)
VALUES (%(tenant)s, %(run)s, %(seq)s, %(index)s, %(tool)s, %(key)s, %(arguments)s::jsonb,
        'intent', 1, clock_timestamp())
ON CONFLICT (run_id, seq, call_index, tenant_id) DO UPDATE
    SET sends = agents_toolcall.sends + CASE WHEN agents_toolcall.status = 'intent'
                                             THEN 1 ELSE 0 END
    WHERE agents_toolcall.tool = EXCLUDED.tool
      AND agents_toolcall.arguments = EXCLUDED.arguments
RETURNING status, result
