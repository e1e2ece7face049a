-- Take the next %(count)s message numbers of a conversation (in the caller's transaction).
-- No row back: the conversation no longer exists.
UPDATE agents_agentsession SET last_seq = last_seq + %(count)s, updated_at = now()
 WHERE id = %(session)s AND tenant_id = %(tenant)s RETURNING last_seq, inherited_messages, summary_upto
