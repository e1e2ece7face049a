# IdempotencyRecord moves here from the agents app (agents 0009 removes it there). Its table,
# agents_idempotencyrecord, was created by agents 0001 with row-level security from agents
# 0002 and stays exactly as it is: this migration changes the project state only.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("tenants", "0003_api_limits"),
        # The table exists (created by agents 0001) before this app claims it.
        ("agents", "0008_checkpoint_columns_default_in_the_database"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="IdempotencyRecord",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("key", models.CharField(max_length=255)),
                        ("fingerprint", models.CharField(max_length=64)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("started", "Started"),
                                    ("succeeded", "Succeeded"),
                                    ("failed", "Failed"),
                                ],
                                max_length=16,
                            ),
                        ),
                        (
                            "response_status",
                            models.PositiveSmallIntegerField(blank=True, null=True),
                        ),
                        ("response_body", models.JSONField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("expires_at", models.DateTimeField()),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="tenants.tenant",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "agents_idempotencyrecord",
                        "indexes": [
                            models.Index(
                                fields=["expires_at"], name="agents_idem_expires_7d5795_idx"
                            )
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("tenant", "key"), name="idempotency_unique_key"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
