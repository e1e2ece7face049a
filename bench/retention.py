"""Retention by partition against retention row by row, on the embedded PostgreSQL with fsync
etc. on: a month of audit events (tenants/audit_retention.py) and a month of checkpoints
(agents/runtime/run_partitions.py), each dropped by the sweep against as many rows deleted in
batches (what the sweeps do for rows outside a droppable month).

    .venv/bin/python bench/retention.py [--rows 1000000] [--batch 1000] [--only audit,checkpoints]

Checkpoints: --rows checkpoints of --rows/20 runs finished two months ago (20 steps each), in
their month's partition, dropped by the sweep; then as many of runs made before ids were
time-ordered (their rows in the default partition), deleted by purge_old_checkpoints in
batches, then VACUUM.

Audit events:
writes --rows events of one bench tenant into a month two years back (its own partition),
checkpoints, and times the sweep's drop of that month with the WAL it wrote; then writes as
many into a month three years back that has no partition (they wait in the default
partition, as rows kept past their month do), checkpoints, and times the sweep's batch
delete of them (`--batch` rows per transaction, oldest first by the (tenant, id) index) with
its WAL, and the VACUUM that the deleted rows then need.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as common  # noqa: E402

# Ids below every real one (old events have the low ids: the batch delete walks a tenant's
# events in id order and stops at the first inside its window).
INSERT = """
INSERT INTO tenants_auditevent (id, tenant_id, actor_label, action, target_type, target_id,
                                after, created_at)
SELECT %(first)s + g, %(tenant)s, 'bench', 'bench.event', 'run', g::text,
       jsonb_build_object('n', g, 'why', 'retention bench'),
       %(start)s + g * interval '1 second'
  FROM generate_series(1, %(rows)s) g
"""


RUNS = """
INSERT INTO agents_run (id, tenant_id, agent, agent_version, status, current_step, step_seq,
    input, attempts, lease_owner, version, state_schema_version, waiting_for,
    cancel_requested, event_seq, created_at, updated_at, started_at, finished_at)
SELECT CASE WHEN %(v7)s THEN uuidv7(%(made)s::timestamptz - now()) ELSE gen_random_uuid() END,
       %(tenant)s, 'bench', 1, 'succeeded', 'done', 20, '{}', 0, '', 22, 1, '', false, 21,
       %(made)s, %(made)s, %(made)s, %(made)s::timestamptz + interval '1 minute'
  FROM generate_series(1, %(runs)s)
RETURNING id
"""
CHECKPOINTS = """
INSERT INTO agents_checkpoint (tenant_id, run_id, seq, step, next_step, state, schema_version,
    messages_upto, created_at, worker, status)
SELECT r.tenant_id, r.id, s, 'step', 'next', jsonb_build_object('n', s, 'refund', 'A-1002'),
       1, 0, r.created_at, 'bench@host', 'running'
  FROM agents_run r CROSS JOIN generate_series(1, 20) s
 WHERE r.id = ANY(%(ids)s::uuid[])
"""


def lsn(conn) -> int:
    return conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]


def measure(conn, work) -> tuple[float, int]:
    conn.execute("CHECKPOINT")
    start_lsn, t0 = lsn(conn), time.perf_counter()
    work()
    return time.perf_counter() - t0, int(lsn(conn) - start_lsn)


def audit(admin, args, now) -> dict:
    from django.db import connection

    from core import partitions
    from tenants import audit_retention
    from tenants.scope import system_scope

    tenant = common.bench_tenant("retention-audit")
    table = audit_retention.TABLE
    dropped_month = partitions.add_months(partitions.month_of(now), -24)
    waiting_month = partitions.add_months(partitions.month_of(now), -36)
    with system_scope("bench"), connection.cursor() as cursor:
        partitions.ensure_months(cursor, table, "created_at", [dropped_month])
    first = -4 * args.rows
    admin.execute(
        INSERT, {"first": first, "tenant": tenant.pk, "start": dropped_month, "rows": args.rows}
    )
    admin.execute(f"VACUUM {table}")  # as months-old rows are: vacuumed, their hint bits set
    drop_s, drop_wal = measure(admin, lambda: audit_retention.audit_drop_old_months(now=now))
    with connection.cursor() as cursor:
        assert dropped_month not in partitions.months(cursor, table)
    first = -2 * args.rows
    admin.execute(
        INSERT, {"first": first, "tenant": tenant.pk, "start": waiting_month, "rows": args.rows}
    )
    admin.execute(f"VACUUM ANALYZE {table}")
    cutoff = now - dt.timedelta(days=tenant.audit_retention_days or 365)

    def delete() -> None:
        gone = audit_retention._batches(
            audit_retention.PURGE_OLD_SQL, str(tenant.pk), tenant.pk, cutoff, args.batch
        )
        assert gone == args.rows, gone

    delete_s, delete_wal = measure(admin, delete)
    vacuum = measure(admin, lambda: admin.execute(f"VACUUM {partitions.default_name(table)}"))
    return {"drop": (drop_s, drop_wal), "delete": (delete_s, delete_wal), "vacuum": vacuum}


def checkpoints(admin, args, now) -> dict:
    from django.db import connection

    from agents.runtime import run_partitions
    from core import partitions
    from memory.facts import retention
    from tenants.scope import system_scope

    tenant = common.bench_tenant("retention-checkpoints")
    table = "agents_checkpoint"
    made = now - dt.timedelta(days=62)
    month = partitions.month_of(made)
    with system_scope("bench"), connection.cursor() as cursor:
        for name in run_partitions.TABLES:
            partitions.ensure_months(cursor, name, "run_id", [made])
    runs = max(1, args.rows // 20)

    def write(v7: bool) -> None:
        ids = [
            r[0]
            for r in admin.execute(
                RUNS, {"v7": v7, "made": made, "tenant": tenant.pk, "runs": runs}
            ).fetchall()
        ]
        admin.execute(CHECKPOINTS, {"ids": ids})

    write(True)
    admin.execute(f"VACUUM {table}")  # as months-old rows are: vacuumed, their hint bits set
    drop_s, drop_wal = measure(admin, lambda: run_partitions.drop_old_months(table, now=now))
    with connection.cursor() as cursor:
        assert month not in partitions.months(cursor, table)
    write(False)
    admin.execute(f"VACUUM ANALYZE {table}")

    def delete() -> None:
        gone = retention.purge_old_checkpoints(now=now, batch=args.batch, max_batches=10**9)
        assert gone >= runs * 20, gone

    delete_s, delete_wal = measure(admin, delete)
    vacuum = measure(admin, lambda: admin.execute(f"VACUUM {partitions.default_name(table)}"))
    return {"drop": (drop_s, drop_wal), "delete": (delete_s, delete_wal), "vacuum": vacuum}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--only", default="audit,checkpoints")
    args = parser.parse_args()
    common.setup_django()
    common.assert_durable()

    from django.utils import timezone

    now = timezone.now()
    admin = common.super_connect("agentstate")
    results = {}
    try:
        for name, work in (("audit", audit), ("checkpoints", checkpoints)):
            if name in args.only.split(","):
                results[name] = work(admin, args, now)
    finally:
        admin.close()

    for name, found in results.items():
        (drop_s, drop_wal), (delete_s, delete_wal) = found["drop"], found["delete"]
        vacuum_s, vacuum_wal = found["vacuum"]
        print(f"\nretention of {args.rows:,} {name} rows (one month)")
        print(f"{'how':42} {'time s':>8} {'WAL MB':>9}")
        print(f"{'drop the month (the sweep, counts included)':42} {drop_s:8.2f}"
              f" {drop_wal / 1e6:9.3f}")  # fmt: skip
        print(f"{f'delete in batches of {args.batch}':42} {delete_s:8.2f} {delete_wal / 1e6:9.1f}")
        print(f"{'  then VACUUM of the deleted rows':42} {vacuum_s:8.2f} {vacuum_wal / 1e6:9.1f}")
        print(f"drop vs delete: {delete_s / drop_s:.0f}x faster, "
              f"{delete_wal / max(drop_wal, 1):.0f}x less WAL")  # fmt: skip
    common.dump_json({
        "bench": "retention", "rows": args.rows, "batch": args.batch,
        **{
            name: {key: {"seconds": round(v[0], 3), "wal_bytes": v[1]} for key, v in found.items()}
            for name, found in results.items()
        },
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
