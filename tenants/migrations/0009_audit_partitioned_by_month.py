"""The audit log partitioned by month of `created_at` (core/partitions.py), so retention drops a
month in one statement instead of deleting it row by row. Every row is moved, with its id;
the primary key becomes (id, created_at), as a partitioned table's keys must hold the
partition column. Months are made from the oldest event's to two ahead, and a default
partition takes whatever falls outside them. Reversible: back to one table, every row kept.
"""

import datetime as dt

from django.db import migrations

from core import partitions

TABLE = "tenants_auditevent"


def forward(apps, schema_editor):
    now = dt.datetime.now(dt.UTC)
    with schema_editor.connection.cursor() as cursor:
        partitions.convert(
            cursor, TABLE, key="id, created_at", column="created_at",
            wanted=partitions.months_between(now, partitions.add_months(now, 2)),
        )  # fmt: skip


def backward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        partitions.convert(cursor, TABLE, key="id")


class Migration(migrations.Migration):
    dependencies = [("tenants", "0008_primary_keys_with_the_tenant")]

    operations = [migrations.RunPython(forward, backward)]
