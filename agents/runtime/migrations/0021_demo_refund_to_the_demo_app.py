"""The demo's ledger moves to the demo app (agents/demo/models.py): only Django's idea of
which app holds it changes; the table, its rows and its name stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("agents", "0020_external_rows_without_fk_triggers")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="DemoRefund")],
            database_operations=[],
        )
    ]
