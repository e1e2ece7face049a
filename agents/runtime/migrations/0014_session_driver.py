from django.db import migrations, models


class Migration(migrations.Migration):
    """A LangGraph thread remembers who drives it (agents/runtime/external.py): only that
    API key or person writes its checkpoints and interrupts."""

    dependencies = [("agents", "0013_rls_reads_settings_once")]

    operations = [
        migrations.AddField(
            model_name="agentsession",
            name="driver",
            field=models.CharField(blank=True, db_default="", default="", max_length=100),
        ),
    ]
