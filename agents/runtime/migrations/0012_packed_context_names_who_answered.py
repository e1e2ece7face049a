# A packed context names the provider and model that answered its call. Blank for the rows
# written before (and defaulted in the database, so an older worker's INSERT still works).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0011_run_lost_at_and_claim_v2"),
    ]

    operations = [
        migrations.AddField(
            model_name="packedcontext",
            name="provider",
            field=models.CharField(blank=True, db_default="", default="", max_length=100),
        ),
        migrations.AddField(
            model_name="packedcontext",
            name="provider_model",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
    ]
