"""Runs taken back from a lost worker carry `lost_at` until a worker claims them again; the
claim (agents_claim_run v2) records that recovery on the step.started event and names the
worker."""

from pathlib import Path

from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "engine" / "sql"
SIGNATURE = "agents_claim_run(uuid, uuid, text, double precision)"


class Migration(migrations.Migration):
    dependencies = [("agents", "0010_external_checkpoints")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="lost_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="stepattempt",
            name="outcome",
            field=models.CharField(
                choices=[
                    ("succeeded", "Succeeded"),
                    ("retrying", "Failed, will retry"),
                    ("failed", "Failed"),
                    ("lost", "Worker lost"),
                    ("fenced", "Superseded by another worker"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunSQL(
            (SQL / "claim_run_v2.sql").read_text(),
            f"DROP FUNCTION IF EXISTS {SIGNATURE};\n"
            + (SQL / "claim_run_v1.sql").read_text()
            + f";\nALTER FUNCTION {SIGNATURE} SET enable_seqscan = off",
        ),
    ]
