"""Row-level security as migration operations.

Every tenant-owned table gets `enable_rls(table)` in the migration that creates it. The
policy reads per-transaction settings that `tenants.scope` sets with `SET LOCAL`:

- `app.tenant_id`: the tenant the current request, API call or task acts for;
- `app.system_context`: the name of the explicit system context (cross-tenant sweeps).

With neither set, a tenant-owned table shows no rows and accepts no writes.
"""

from __future__ import annotations

from django.db import migrations

from tenants import sql

FUNCTIONS_SQL = sql.load("tenants", "rls_functions")
FUNCTIONS_REVERSE_SQL = sql.load("tenants", "rls_functions_drop")


def enable_rls(table: str, *, column: str = "tenant_id") -> migrations.RunSQL:
    """Turn on forced row-level security for `table`, keyed on `column`."""
    scope = f"({column} = app_tenant_id() OR app_in_system_context())"
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
