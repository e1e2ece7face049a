"""The engine's claim and persist as PL/pgSQL functions: one round trip each, plans cached.

The SQL lives in agents/runtime/engine/sql/, one file per released version; a change to either
function is a new file and a new migration, never an edit of a released one.
"""

from pathlib import Path

import django.db.models.deletion
from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "engine" / "sql"


def sql(name: str) -> str:
    return (SQL / name).read_text()


class Migration(migrations.Migration):
    dependencies = [("agents", "0005_threads_and_context")]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status__in", ["succeeded", "cancelled"]), _negated=True),
                fields=["status"],
                name="run_open_by_status",
            ),
        ),
        # No foreign-key triggers on the rows every step writes (see the models).
        migrations.AlterField(
            model_name="checkpoint",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="checkpoints",
                to="agents.run",
            ),
        ),
        migrations.AlterField(
            model_name="stepattempt",
            name="run",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="attempts_log",
                to="agents.run",
            ),
        ),
        migrations.RunSQL(
            sql("claim_run_v1.sql"),
            "DROP FUNCTION IF EXISTS agents_claim_run(uuid, uuid, text, double precision)",
        ),
        migrations.RunSQL(
            sql("persist_step_v1.sql"),
            "DROP FUNCTION IF EXISTS agents_persist_step("
            "uuid, uuid, integer, text, text, text, integer, integer, text, jsonb, jsonb,"
            " timestamptz, text, integer, text, jsonb, integer, integer, timestamptz,"
            " double precision)",
        ),
    ]
