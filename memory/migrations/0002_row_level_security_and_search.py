from django.db import migrations

from tenants.rls import enable_rls

TABLES = [
    "memory_memoryfact",
    "memory_memorypolicy",
    "memory_memorysettings",
    "memory_privacylinkuse",
]

# Full-text search over a fact's text, kept by PostgreSQL itself. No GIN index: retrieval
# filters on the (tenant, subject) B-tree first and ranks the few rows that remain exactly.
SEARCH_SQL = """
ALTER TABLE memory_memoryfact ADD COLUMN search tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED;
"""


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_initial"), ("tenants", "0002_row_level_security")]

    operations = [
        *[enable_rls(table) for table in TABLES],
        migrations.RunSQL(
            SEARCH_SQL, reverse_sql="ALTER TABLE memory_memoryfact DROP COLUMN search;"
        ),
    ]
