"""Row-level security as migration operations.

Every tenant-owned table gets `enable_rls(table)` in the migration that creates it. The
policy reads per-transaction settings that `tenants.scope` sets with `SET LOCAL`:

- `app.tenant_id`: the tenant the current request, API call or task acts for;
- `app.system_context`: the name of the explicit system context (cross-tenant sweeps).

With neither set, a tenant-owned table shows no rows and accepts no writes.
"""

from __future__ import annotations

from django.db import migrations

from core import sql

FUNCTIONS_SQL = sql.load("tenants", "rls_functions")
FUNCTIONS_REVERSE_SQL = sql.load("tenants", "rls_functions_drop")


def enable_rls(table: str, *, column: str = "tenant_id") -> migrations.RunSQL:
    """Turn on forced row-level security for `table`, keyed on `column`."""
    # Each setting is read once per statement (an InitPlan), not once per row: a scan of a
    # tenant's 300,000 runs took twice as long reading it per row.
    scope = f"({column} = (SELECT app_tenant_id()) OR (SELECT app_in_system_context()))"
    return migrations.RunSQL(
        sql=f"""
            ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
            ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
            CREATE POLICY tenant_isolation ON {table}
                USING {scope} WITH CHECK {scope};
        """,
        reverse_sql=f"""
            DROP POLICY IF EXISTS tenant_isolation ON {table};
            ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY;
            ALTER TABLE {table} DISABLE ROW LEVEL SECURITY;
        """,
    )


# Rewrites the policies of the app's tables (`<app label>_…`) that read the settings once per
# row, as enable_rls() wrote them before, so they read them once per statement.
SETTINGS_ONCE_SQL = r"""
DO $$
DECLARE
    p record;
    once constant text := '(SELECT \1)';
    per_row constant text := '(app_(tenant_id|user_id|in_system_context)\(\))';
BEGIN
    FOR p IN
        SELECT tablename, policyname,
               regexp_replace(qual, per_row, once, 'g') AS qual,
               regexp_replace(with_check, per_row, once, 'g') AS with_check
        FROM pg_policies
        WHERE schemaname = current_schema() AND tablename LIKE '{app}\_%'
            AND concat(qual, with_check) !~ 'SELECT app_'
    LOOP
        EXECUTE format('ALTER POLICY %I ON %I', p.policyname, p.tablename)
            || coalesce(' USING (' || p.qual || ')', '')
            || coalesce(' WITH CHECK (' || p.with_check || ')', '');
    END LOOP;
END $$;
"""


def read_settings_once(app_label: str) -> migrations.RunSQL:
    """Make the row-level-security policies of `app_label`'s tables read each setting once per
    statement. Same rows either way, so going back leaves them as they are."""
    return migrations.RunSQL(
        sql=SETTINGS_ONCE_SQL.replace("{app}", app_label), reverse_sql=migrations.RunSQL.noop
    )
