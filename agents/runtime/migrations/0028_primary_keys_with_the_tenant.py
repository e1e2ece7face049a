"""Keys that let the tables be distributed by tenant (tenants/distribution.py): the primary key of
every tenant-owned table of this app becomes (id, tenant_id), and its foreign keys to other
distributed tables carry the tenant. Existing rows are checked as the keys are made. The
claim names the tenant in each of its statements (claim_run_v4.sql), as the persist does.
"""

from pathlib import Path

from django.db import migrations

from tenants import distribution

SQL = Path(__file__).resolve().parents[1] / "engine" / "sql"

TABLES = [
    "agents_agentsession",
    "agents_checkpoint",
    "agents_externalblob",
    "agents_externalcheckpoint",
    "agents_externalwrite",
    "agents_graphinterrupt",
    "agents_idempotencyrecord",
    "agents_message",
    "agents_packedcontext",
    "agents_run",
    "agents_runcount",
    "agents_runevent",
    "agents_stepattempt",
    "agents_stuckcount",
    "agents_toolcall",
    "agents_webhookdelivery",
    "agents_webhookendpoint",
]
PRIMARY, PRIMARY_BACK = distribution.primary_keys_sql(TABLES)
FOREIGN, FOREIGN_BACK = distribution.foreign_keys_sql(TABLES)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0027_keys_with_the_tenant"),
    ]

    operations = [
        migrations.RunSQL(PRIMARY, PRIMARY_BACK),
        migrations.RunSQL(FOREIGN, FOREIGN_BACK),
        migrations.RunSQL(
            (SQL / "claim_run_v4.sql").read_text(), (SQL / "claim_run_v3.sql").read_text()
        ),
    ]
