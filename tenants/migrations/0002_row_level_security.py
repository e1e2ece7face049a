from django.db import migrations

from tenants.rls import FUNCTIONS_REVERSE_SQL, FUNCTIONS_SQL, enable_rls

# Tenants and memberships are also readable by a user who belongs to them, before a tenant
# is chosen: that is how the console lists the tenants a user may switch to.
DIRECTORY_SQL = """
CREATE POLICY member_reads_own ON tenants_membership FOR SELECT
    USING (user_id = app_user_id());

ALTER TABLE tenants_tenant ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenants_tenant FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenants_tenant
    USING (id = app_tenant_id() OR app_in_system_context())
    WITH CHECK (id = app_tenant_id() OR app_in_system_context());
CREATE POLICY member_reads_own ON tenants_tenant FOR SELECT
    USING (EXISTS (SELECT 1 FROM tenants_membership m
                   WHERE m.tenant_id = tenants_tenant.id AND m.user_id = app_user_id()));
"""
DIRECTORY_REVERSE_SQL = """
DROP POLICY IF EXISTS member_reads_own ON tenants_membership;
DROP POLICY IF EXISTS member_reads_own ON tenants_tenant;
DROP POLICY IF EXISTS tenant_isolation ON tenants_tenant;
ALTER TABLE tenants_tenant NO FORCE ROW LEVEL SECURITY;
ALTER TABLE tenants_tenant DISABLE ROW LEVEL SECURITY;
"""

# The audit log is append-only in the database itself: no UPDATE ever, and DELETE only by
# a retention sweep running in the system context.
AUDIT_APPEND_ONLY_SQL = """
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' OR NOT app_in_system_context() THEN
        RAISE EXCEPTION 'audit events are append-only' USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END $$;
CREATE TRIGGER audit_event_append_only BEFORE UPDATE OR DELETE ON tenants_auditevent
    FOR EACH ROW EXECUTE FUNCTION audit_event_append_only();
"""
AUDIT_APPEND_ONLY_REVERSE_SQL = """
DROP TRIGGER IF EXISTS audit_event_append_only ON tenants_auditevent;
DROP FUNCTION IF EXISTS audit_event_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]

    operations = [
        migrations.RunSQL("CREATE EXTENSION IF NOT EXISTS vector", migrations.RunSQL.noop),
        migrations.RunSQL(FUNCTIONS_SQL, FUNCTIONS_REVERSE_SQL),
        enable_rls("tenants_membership"),
        enable_rls("tenants_apikey"),
        enable_rls("tenants_auditevent"),
        migrations.RunSQL(DIRECTORY_SQL, DIRECTORY_REVERSE_SQL),
        migrations.RunSQL(AUDIT_APPEND_ONLY_SQL, AUDIT_APPEND_ONLY_REVERSE_SQL),
    ]
