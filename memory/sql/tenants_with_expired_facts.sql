-- Retention (system context, a read without locks): the tenants with facts past their
-- expiry; each is then purged on its own (purge_expired_facts.sql, purge_old_versions.sql).
SELECT DISTINCT tenant_id FROM memory_memoryfact WHERE expires_at < %(now)s
