"""`agents_run.queued_at`: when a run last entered the queue, set by triggers
(engine/sql/queued_at_v1.sql). The runs queued now get the time their latest event (or their
creation, or the time they were due) put them there, as the stuck check computed it before."""

from pathlib import Path

from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "engine" / "sql"

FILL_SQL = """
SELECT set_config('app.system_context', 'migration', true);
UPDATE agents_run r SET queued_at = greatest(
    coalesce(r.not_before, r.created_at),
    coalesce((SELECT e.created_at FROM agents_runevent_log e
              WHERE e.run_id = r.id AND e.seq = r.event_seq LIMIT 1), r.created_at))
WHERE r.status = 'queued';
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0021_demo_refund_to_the_demo_app"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="queued_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.RunSQL(
            (SQL / "queued_at_v1.sql").read_text() + FILL_SQL,
            (SQL / "queued_at_v1_drop.sql").read_text(),
        ),
    ]
