# IdempotencyRecord moves here from the core app (core 0003 lets it go), so that core sits
# below tenancy. Its table, agents_idempotencyrecord (created by agents 0001, row-level
# security from agents 0002), stays exactly as it is: this migration changes the project
# state only.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0006_apikey_personal_tokens"),
        ("core", "0003_idempotencyrecord_moves_to_tenants"),
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
