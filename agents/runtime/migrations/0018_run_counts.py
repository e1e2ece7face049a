"""Counts of a tenant's runs by status that cost the same at any size: `agents_runcount`,
kept by triggers on `agents_run` (engine/sql/run_counts_v1.sql), filled here from the runs
there are. agents_run is locked against writes meanwhile (reads go on), so no run is counted
twice or missed between the fill and the triggers."""

from pathlib import Path

import django.db.models.deletion
from django.db import migrations, models

from tenants.rls import enable_rls

SQL = Path(__file__).resolve().parent.parent / "engine" / "sql"

FILL_SQL = """
SELECT set_config('app.system_context', 'migration', true);
LOCK TABLE agents_run IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO agents_runcount (tenant_id, status, n)
SELECT tenant_id, status, count(*) FROM agents_run GROUP BY tenant_id, status;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0017_run_recovered_at_and_claim_v3"),
        ("tenants", "0005_rls_reads_settings_once"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunCount",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("waiting_approval", "Waiting for approval"),
                            ("waiting_timer", "Waiting for a timer"),
                            ("waiting_event", "Waiting for an event"),
                            ("succeeded", "Succeeded"),
                            ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                        ],
                        max_length=20,
                    ),
                ),
                ("n", models.BigIntegerField()),
                (
                    "tenant",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["tenant", "status"], name="runcount_tenant_status")
                ],
            },
        ),
        enable_rls("agents_runcount"),
        migrations.RunSQL(
            (SQL / "run_counts_v1.sql").read_text() + FILL_SQL,
            (SQL / "run_counts_v1_drop.sql").read_text(),
        ),
    ]
