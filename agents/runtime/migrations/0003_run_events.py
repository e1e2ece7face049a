# Per-run event numbers and the events themselves (live progress, issue 5).

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from tenants.rls import enable_rls


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0002_row_level_security"),
        ("tenants", "0002_row_level_security"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="event_seq",
            field=models.PositiveIntegerField(db_default=0, default=0),
        ),
        migrations.CreateModel(
            name="RunEvent",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("seq", models.PositiveIntegerField()),
                ("kind", models.CharField(max_length=40)),
                ("data", models.JSONField(default=dict)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="events",
                        to="agents.run",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "ordering": ["run", "seq"],
                "constraints": [
                    models.UniqueConstraint(fields=("run", "seq"), name="runevent_unique_seq")
                ],
            },
        ),
        enable_rls("agents_runevent"),
    ]
