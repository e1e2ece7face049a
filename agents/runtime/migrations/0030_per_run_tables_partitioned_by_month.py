"""The per-run tables partitioned by the month their run was made (core/partitions.py): run ids
are time-ordered (UUID v7, 0029), so `run_id` ranges are months, every engine lookup (by
run, tenant and seq) goes to one partition, and retention drops a month whose runs are all
past their tenant's window in one statement. Every row moves, with its id; the primary key
becomes (id, tenant_id, run_id), as a partitioned table's must hold its partition column.
Rows of runs made before ids were time-ordered stay in each table's default partition.
Reversible: back to plain tables, every row kept.
"""

import datetime as dt

from django.db import migrations

from core import partitions

TABLES = [
    "agents_checkpoint",
    "agents_runevent",
    "agents_stepattempt",
    "agents_toolcall",
    "agents_packedcontext",
]
VIEWS = """
SELECT DISTINCT v.relname, pg_get_viewdef(v.oid), v.reloptions
  FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class
 WHERE d.refobjid = ANY(%s::regclass[]) AND v.relkind = 'v'
"""


def _rebuild(schema_editor, *, partitioned: bool) -> None:
    now = dt.datetime.now(dt.UTC)
    with schema_editor.connection.cursor() as cursor:
        # Views follow the table they were made on: put them back on the new ones.
        cursor.execute(VIEWS, [TABLES])
        views = cursor.fetchall()
        for name, _, _ in views:
            cursor.execute(f"DROP VIEW {name}")
        for table in TABLES:
            if partitioned:
                partitions.convert(
                    cursor, table, key="id, tenant_id, run_id", column="run_id",
                    wanted=partitions.months_between(now, partitions.add_months(now, 2)),
                )  # fmt: skip
            else:
                partitions.convert(cursor, table, key="id, tenant_id")
        for name, definition, options in views:
            given = f" WITH ({', '.join(options)})" if options else ""
            cursor.execute(f"CREATE VIEW {name}{given} AS {definition}")


def forward(apps, schema_editor):
    _rebuild(schema_editor, partitioned=True)


def backward(apps, schema_editor):
    _rebuild(schema_editor, partitioned=False)


class Migration(migrations.Migration):
    dependencies = [("agents", "0029_run_ids_time_ordered")]

    operations = [migrations.RunPython(forward, backward)]
