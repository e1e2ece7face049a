-- Ledger: what the position holds when record_tool_intent.sql found another call there.
-- After set_tenant.sql.
SELECT tool, arguments FROM agents_toolcall
 WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND seq = %(seq)s AND call_index = %(index)s
