"""Run logs stored once: a checkpoint carries what its step appended (`Checkpoint.appended`),
and agents_persist_step v4 writes it (agents/runtime/engine/sql/persist_step_v4.sql). The
function gains a parameter, so the v3 signature is dropped first (and restored on reverse)."""

from pathlib import Path

from django.db import migrations, models

SQL = Path(__file__).resolve().parents[1] / "engine" / "sql"

V3 = (
    "uuid, uuid, integer, text, text, text, integer, integer, text, jsonb, jsonb, timestamptz,"
    " text, integer, text, jsonb, integer, integer, timestamptz, double precision"
)
V4 = V3 + ", jsonb"


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0025_run_recovering_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="appended",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunSQL(
            f"DROP FUNCTION agents_persist_step({V3});\n"
            + (SQL / "persist_step_v4.sql").read_text(),
            f"DROP FUNCTION agents_persist_step({V4});\n"
            + (SQL / "persist_step_v3.sql").read_text(),
        ),
    ]
