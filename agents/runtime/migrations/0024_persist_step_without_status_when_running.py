"""agents_persist_step v3: a step after which the run goes on running updates the run without
naming its status, so the row triggers on `UPDATE OF status` are not considered on the
engine's most frequent write (agents/runtime/engine/sql/persist_step_v3.sql)."""

from pathlib import Path

from django.db import migrations

SQL = Path(__file__).resolve().parents[1] / "engine" / "sql"


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0023_drop_indexes_the_unique_keys_cover"),
    ]

    operations = [
        migrations.RunSQL(
            (SQL / "persist_step_v3.sql").read_text(),
            (SQL / "persist_step_v2.sql").read_text(),
        ),
    ]
