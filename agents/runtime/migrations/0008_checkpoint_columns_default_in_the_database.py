# Checkpoint columns added by 0007 get their empty default in the database too, so a raw
# INSERT that does not name them (an older persist, a hand-written repair) still works.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0007_checkpoint_carries_attempt_and_event"),
    ]

    operations = [
        migrations.AlterField(
            model_name="checkpoint",
            name="status",
            field=models.CharField(blank=True, db_default="", default="", max_length=20),
        ),
        migrations.AlterField(
            model_name="checkpoint",
            name="worker",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
    ]
