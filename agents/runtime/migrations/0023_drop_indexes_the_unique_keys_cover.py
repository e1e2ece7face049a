"""Two indexes nothing needs: a message's session and a tool call's run are the first
columns of their unique keys (message_unique_seq, toolcall_unique_position), which serve
every lookup and the foreign keys' checks. Each insert of a message or a tool call writes one
index entry fewer. Dropped concurrently (no lock on writers) and without touching the foreign
keys, which Django would drop and validate again on the whole table."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # DROP INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("agents", "0022_run_queued_at"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="message",
                    name="session",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="agents.agentsession",
                    ),
                ),
                migrations.AlterField(
                    model_name="toolcall",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="tool_calls",
                        to="agents.run",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS agents_message_session_id_eb486117",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS agents_message_session_id_eb486117"
                    " ON agents_message (session_id)",
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS agents_toolcall_run_id_1a8efdb2",
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS agents_toolcall_run_id_1a8efdb2"
                    " ON agents_toolcall (run_id)",
                ),
            ],
        ),
    ]
