-- An active, unexpired integration key (not a person's token) of the tenant, by its hash: the
-- key check the LangGraph door's functions share ({key_active} in external_step_function.sql
-- and external_read_function.sql, put in when they are installed).
k.tenant_id = p_tenant AND k.key_hash = p_key_hash AND k.revoked_at IS NULL
AND k.user_id IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())
