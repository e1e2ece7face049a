"""The counts of a run and of a checkpoint (version, step_seq, seq, ...) are checked >= 0 by one
CHECK per table (`least(...) >= 0`) instead of one per column (core/fields.py CountField):
PostgreSQL reads and prepares every CHECK expression again for each statement that writes
the row, and the engine writes both rows on every step (bench/README.md, session 25). The
same rows pass and fail as before.

Not atomic, so a large table is not locked while it is checked: the new CHECK is added NOT
VALID (a moment's lock; new writes are checked from then on), validated while writes go on,
and only then are the per-column CHECKs dropped. Reversible.
"""

from django.db import migrations

import core.fields
from core.fields import counts_not_negative

RUN = ("agent_version", "step_seq", "attempts", "version", "state_schema_version", "event_seq")
CHECKPOINT = ("seq", "schema_version", "messages_upto", "attempt", "event_seq")
CONSTRAINTS = [
    ("run", "agents_run", "run_counts_not_negative", RUN),
    ("checkpoint", "agents_checkpoint", "checkpoint_counts_not_negative", CHECKPOINT),
]
NULLABLE = {("checkpoint", "attempt"), ("checkpoint", "event_seq")}
DEFAULTS = {
    ("run", "step_seq"): {"default": 0},
    ("run", "attempts"): {"default": 0},
    ("run", "version"): {"default": 1},
    ("run", "state_schema_version"): {"default": 1},
    ("run", "event_seq"): {"default": 0, "db_default": 0},
    ("checkpoint", "messages_upto"): {"default": 0},
}


def _field(model: str, name: str) -> core.fields.CountField:
    if (model, name) in NULLABLE:
        return core.fields.CountField(null=True, blank=True)
    return core.fields.CountField(**DEFAULTS.get((model, name), {}))


def _add(model: str, table: str, name: str, columns: tuple[str, ...]):
    return migrations.SeparateDatabaseAndState(
        state_operations=[
            migrations.AddConstraint(
                model_name=model, constraint=counts_not_negative(name, *columns)
            )
        ],
        database_operations=[
            migrations.RunSQL(
                f"ALTER TABLE {table} ADD CONSTRAINT {name}"
                f" CHECK (LEAST({', '.join(columns)}) >= 0) NOT VALID",
                reverse_sql=f"ALTER TABLE {table} DROP CONSTRAINT {name}",
            ),
            migrations.RunSQL(
                f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}",
                reverse_sql=migrations.RunSQL.noop,
            ),
        ],
    )


class Migration(migrations.Migration):
    atomic = False  # VALIDATE CONSTRAINT lets writes go on only outside the ADD's transaction

    dependencies = [("agents", "0030_per_run_tables_partitioned_by_month")]

    operations = [
        *(_add(*spec) for spec in CONSTRAINTS),
        *(
            migrations.AlterField(model_name=model, name=column, field=_field(model, column))
            for model, _, _, columns in CONSTRAINTS
            for column in columns
        ),
    ]
