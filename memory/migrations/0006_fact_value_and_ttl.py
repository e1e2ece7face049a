"""A fact may hold a JSON object (`value`, its text derived from it) and a TTL of its own."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memory", "0005_rls_reads_settings_once")]

    operations = [
        migrations.AddField(
            model_name="memoryfact", name="value", field=models.JSONField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="memoryfact",
            name="ttl_minutes",
            field=models.FloatField(blank=True, null=True),
        ),
    ]
