"""A run claimed again after its worker was lost keeps when: `recovered_at`, set by the
claim that recovers it (agents_claim_run v3), so every list can say "Recovered
automatically" once the "Worker lost — recovering" state is over."""

from pathlib import Path

from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "engine" / "sql"
SIGNATURE = "agents_claim_run(uuid, uuid, text, double precision)"


class Migration(migrations.Migration):
    dependencies = [("agents", "0016_graph_interrupts")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="recovered_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(
            (SQL / "claim_run_v3.sql").read_text(),
            (SQL / "claim_run_v2.sql").read_text(),
        ),
    ]
