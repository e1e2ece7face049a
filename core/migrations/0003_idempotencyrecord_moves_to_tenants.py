# IdempotencyRecord moves to the tenants app (tenants 0007 claims it), so that core, the
# shared plumbing, sits below tenancy. Its table, agents_idempotencyrecord, and the table's
# row-level-security policy stay exactly as they are: this migration changes the project
# state only.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0002_leader_lease"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="IdempotencyRecord")],
            database_operations=[],
        ),
    ]
