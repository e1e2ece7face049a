from django.db import migrations

from tenants.rls import enable_rls

TABLES = [
    "agents_agentsession",
    "agents_message",
    "agents_run",
    "agents_checkpoint",
    "agents_stepattempt",
    "agents_toolcall",
    "agents_idempotencyrecord",
]


class Migration(migrations.Migration):
    dependencies = [("agents", "0001_initial"), ("tenants", "0002_row_level_security")]

    operations = [enable_rls(table) for table in TABLES]
