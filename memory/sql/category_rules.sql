-- A tenant's memory retention with each of its category policies (one row with NULL policy
-- columns when it has none).
SELECT t.memory_retention_days, p.category, p.label, p.ttl_days, p.max_facts_per_subject,
       p.agents_may_write
  FROM tenants_tenant t
  LEFT JOIN memory_memorypolicy p ON p.tenant_id = t.id
 WHERE t.id = %s
