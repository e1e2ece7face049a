"""Stuck counts per tenant as the stuck sweep last counted them (`agents_stuckcount`), so the
console's card costs one indexed read at any size."""

import django.db.models.deletion
from django.db import migrations, models

from tenants.rls import enable_rls


class Migration(migrations.Migration):
    dependencies = [("agents", "0018_run_counts")]

    operations = [
        migrations.CreateModel(
            name="StuckCount",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("reason", models.CharField(max_length=40)),
                ("n", models.PositiveIntegerField()),
                ("counted_at", models.DateTimeField()),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "reason"), name="stuckcount_tenant_reason"
                    )
                ],
            },
        ),
        enable_rls("agents_stuckcount"),
    ]
