-- Sent ahead of a statement in the same message: the tenant whose rows the rest of the
-- message (one implicit transaction) may see and write. Parameter: %(tenant)s.
SELECT set_config('app.tenant_id', %(tenant)s, true);
