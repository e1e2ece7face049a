"""The demo's ledger, made by the runtime's first migration and handed over to this app by its
0021 (the table is not touched)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [("agents", "0021_demo_refund_to_the_demo_app")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="DemoRefund",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("idempotency_key", models.CharField(max_length=255, unique=True)),
                        ("customer", models.CharField(max_length=100)),
                        ("amount_cents", models.PositiveIntegerField()),
                        ("requests", models.PositiveIntegerField(default=1)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={"db_table": "agents_demorefund"},
                )
            ],
            database_operations=[],
        )
    ]
