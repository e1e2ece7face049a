"""A step writes two rows: the run update and its checkpoint.

The checkpoint now also records the attempt that produced it and that step's
step.finished event, which used to be a StepAttempt row and a RunEvent row of their own.
Existing rows are folded in. agents_runevent_log is the run's whole event log (a view with
the caller's row-level security); StepAttempt keeps the attempts that wrote no checkpoint.
"""

from pathlib import Path

import django.db.models.deletion
from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "engine" / "sql"

# Fold the successful attempts and the step.finished events into their checkpoints. Runs
# in a system context because every one of these tables forces row-level security.
FOLD_SQL = """
SELECT set_config('app.system_context', 'migration', true);
UPDATE agents_checkpoint cp
   SET attempt = a.attempt, worker = a.worker, started_at = a.started_at,
       duration_ms = a.duration_ms
  FROM agents_stepattempt a
 WHERE a.run_id = cp.run_id AND a.seq = cp.seq AND a.outcome = 'succeeded';
DELETE FROM agents_stepattempt a
 USING agents_checkpoint cp
 WHERE a.run_id = cp.run_id AND a.seq = cp.seq AND a.outcome = 'succeeded';
UPDATE agents_checkpoint cp
   SET event_seq = e.seq, status = coalesce(e.data->>'status', ''),
       attempt = coalesce(cp.attempt, (e.data->>'attempt')::int),
       duration_ms = coalesce(cp.duration_ms, (e.data->>'duration_ms')::float8)
  FROM agents_runevent e
 WHERE e.run_id = cp.run_id AND e.kind = 'step.finished'
   AND (e.data->>'step_seq')::int = cp.seq;
DELETE FROM agents_runevent e
 USING agents_checkpoint cp
 WHERE e.run_id = cp.run_id AND e.kind = 'step.finished' AND e.seq = cp.event_seq;
"""

UNFOLD_SQL = """
SELECT set_config('app.system_context', 'migration', true);
INSERT INTO agents_stepattempt
    (tenant_id, run_id, seq, attempt, step, worker, started_at, ended_at, outcome,
     error_class, error_code, message, traceback, duration_ms)
SELECT tenant_id, run_id, seq, attempt, step, worker, coalesce(started_at, created_at),
       created_at, 'succeeded', '', '', '', '', coalesce(duration_ms, 0)
  FROM agents_checkpoint WHERE attempt IS NOT NULL;
INSERT INTO agents_runevent (tenant_id, run_id, seq, kind, data, created_at)
SELECT tenant_id, run_id, seq, kind, data, created_at
  FROM agents_runevent_log WHERE kind = 'step.finished';
"""

# security_invoker: a view otherwise reads its tables with its owner's rights, and the
# owner is not subject to row-level security the way a session's tenant setting is.
VIEW_SQL = """
CREATE VIEW agents_runevent_log WITH (security_invoker = true) AS
SELECT tenant_id, run_id, seq, kind, data, created_at
  FROM agents_runevent
UNION ALL
SELECT tenant_id, run_id, event_seq, 'step.finished',
       jsonb_build_object('step', step, 'step_seq', seq, 'attempt', attempt,
                          'status', status, 'next_step', next_step,
                          'duration_ms', round(duration_ms::numeric, 1)),
       created_at
  FROM agents_checkpoint
 WHERE event_seq IS NOT NULL;
"""


class Migration(migrations.Migration):
    dependencies = [("agents", "0006_engine_functions")]

    operations = [
        migrations.AddField(
            model_name="checkpoint",
            name="attempt",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="worker",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="duration_ms",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="event_seq",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="checkpoint",
            name="status",
            field=models.CharField(blank=True, default="", max_length=20),
        ),
        migrations.RunSQL(VIEW_SQL, "DROP VIEW IF EXISTS agents_runevent_log"),
        migrations.RunSQL(FOLD_SQL, UNFOLD_SQL),
        migrations.RunSQL(
            (SQL / "persist_step_v2.sql").read_text(),
            (SQL / "persist_step_v1.sql").read_text(),
        ),
        # The claim reads by key only (the run by id, its checkpoint by (run, seq)). Planned
        # once per connection from whatever statistics there were, it once kept a sequential
        # scan of a young, churned agents_checkpoint while the table grew (2 ms per claim in
        # the engine bench instead of 1); with seqscans priced out it always takes the index.
        migrations.RunSQL(
            "ALTER FUNCTION agents_claim_run(uuid, uuid, text, double precision)"
            " SET enable_seqscan = off",
            "ALTER FUNCTION agents_claim_run(uuid, uuid, text, double precision)"
            " RESET enable_seqscan",
        ),
        migrations.CreateModel(
            name="RunEventLog",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run", "seq", blank=True, editable=False, primary_key=True, serialize=False
                    ),
                ),
                ("seq", models.PositiveIntegerField()),
                ("kind", models.CharField(max_length=40)),
                ("data", models.JSONField(default=dict)),
                ("created_at", models.DateTimeField()),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="agents.run",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "db_table": "agents_runevent_log",
                "ordering": ["run", "seq"],
                "managed": False,
            },
        ),
    ]
