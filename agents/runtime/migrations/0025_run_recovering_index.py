"""An index of the runs waiting to be recovered (lost_at set until a claim clears it), for the
admin console's "recovering now" count: built concurrently, writers are not blocked."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("agents", "0024_persist_step_without_status_when_running"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("lost_at__isnull", False)),
                fields=["tenant"],
                name="run_recovering",
            ),
        ),
    ]
