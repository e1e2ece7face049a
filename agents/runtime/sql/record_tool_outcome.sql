-- Ledger: the outcome of a tool call whose intent is recorded. After set_tenant.sql.
UPDATE agents_toolcall
   SET status = %(status)s, result = %(result)s::jsonb, completed_at = clock_timestamp()
 WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND seq = %(seq)s AND call_index = %(index)s AND status = 'intent'
