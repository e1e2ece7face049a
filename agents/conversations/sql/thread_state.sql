-- A thread's summary and counts, with its tenant's hot-cache TTL.
SELECT s.summary, s.summary_upto, s.inherited_messages, s.last_seq, s.user_id,
       t.session_cache_ttl_seconds
  FROM agents_agentsession s JOIN tenants_tenant t ON t.id = s.tenant_id
 WHERE s.id = %(session)s AND s.tenant_id = %(tenant)s
