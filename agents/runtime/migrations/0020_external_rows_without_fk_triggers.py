"""The LangGraph door's per-step rows (external checkpoints, blobs, writes) and graph interrupts
lose their foreign-key constraints (kept in Django: deleting a run or tenant still deletes
them). Each inserted row had its run and tenant checked at commit, and each deleted run
scanned these tables, which have no index leading with run_id: a retention batch or a bench
cleanup of a million runs took tens of minutes behind a few thousand blobs."""

import django.db.models.deletion
from django.db import migrations, models

MODELS = ["externalblob", "externalcheckpoint", "externalwrite", "graphinterrupt"]


def without_constraint(model_name: str, name: str, to: str) -> migrations.AlterField:
    return migrations.AlterField(
        model_name=model_name,
        name=name,
        field=models.ForeignKey(
            db_constraint=False,
            db_index=False,
            on_delete=django.db.models.deletion.CASCADE,
            related_name="+",
            to=to,
        ),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0019_stuck_counts"),
        ("tenants", "0006_apikey_personal_tokens"),
    ]

    operations = [
        without_constraint(model, name, to)
        for model in MODELS
        for name, to in (("run", "agents.run"), ("tenant", "tenants.tenant"))
    ]
