"""Retention of a month of audit events: dropping the month's partition (what the sweep does,
tenants/audit_retention.py) against deleting the same rows in batches (what it does for rows
outside a droppable month), on the embedded PostgreSQL with fsync etc. on.

    .venv/bin/python bench/retention.py [--rows 1000000] [--batch 1000]

Writes --rows events of one bench tenant into a month two years back (its own partition),
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


def lsn(conn) -> int:
    return conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]


def measure(conn, work) -> tuple[float, int]:
    conn.execute("CHECKPOINT")
    start_lsn, t0 = lsn(conn), time.perf_counter()
    work()
    return time.perf_counter() - t0, int(lsn(conn) - start_lsn)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    common.setup_django()
    common.assert_durable()

    from django.db import connection
    from django.utils import timezone

    from core import partitions
    from tenants import audit_retention
    from tenants.scope import system_scope

    now = timezone.now()
    tenant = common.bench_tenant("bench-retention")
    admin = common.super_connect("agentstate")
    table = audit_retention.TABLE
    dropped_month = partitions.add_months(partitions.month_of(now), -24)
    waiting_month = partitions.add_months(partitions.month_of(now), -36)
    try:
        with system_scope("bench"), connection.cursor() as cursor:
            partitions.ensure_months(cursor, table, "created_at", [dropped_month])
        t0 = time.perf_counter()
        admin.execute(
            INSERT,
            {
                "first": -4 * args.rows,
                "tenant": tenant.pk,
                "start": dropped_month,
                "rows": args.rows,
            },
        )
        admin.execute(f"ANALYZE {partitions.month_name(table, dropped_month)}")
        size = admin.execute(
            "SELECT pg_total_relation_size(%s)", [partitions.month_name(table, dropped_month)]
        ).fetchone()[0]
        print(f"wrote {args.rows:,} events into {dropped_month:%Y-%m} in "
              f"{time.perf_counter() - t0:.1f} s ({size / 1e6:.0f} MB with indexes)")  # fmt: skip

        def drop() -> None:
            audit_retention.audit_drop_old_months(now=now)

        drop_s, drop_wal = measure(admin, drop)
        with connection.cursor() as cursor:
            assert dropped_month not in partitions.months(cursor, table)

        admin.execute(
            INSERT,
            {
                "first": -2 * args.rows,
                "tenant": tenant.pk,
                "start": waiting_month,
                "rows": args.rows,
            },
        )
        admin.execute(f"ANALYZE {partitions.default_name(table)}")
        cutoff = now - dt.timedelta(days=tenant.audit_retention_days or 365)

        def delete() -> None:
            gone = audit_retention._batches(
                audit_retention.PURGE_OLD_SQL, str(tenant.pk), tenant.pk, cutoff, args.batch
            )
            assert gone == args.rows, gone

        delete_s, delete_wal = measure(admin, delete)
        vacuum_s, vacuum_wal = measure(
            admin, lambda: admin.execute(f"VACUUM {partitions.default_name(table)}")
        )
    finally:
        admin.close()
        common.cleanup_tenant(tenant)

    print(f"\nretention of {args.rows:,} audit events (one month)")
    print(f"{'how':42} {'time s':>8} {'WAL MB':>9}")
    print(f"{'drop the month (the sweep, counts included)':42} {drop_s:8.2f} {drop_wal / 1e6:9.3f}")
    print(f"{f'delete in batches of {args.batch}':42} {delete_s:8.2f} {delete_wal / 1e6:9.1f}")
    print(f"{'  then VACUUM of the deleted rows':42} {vacuum_s:8.2f} {vacuum_wal / 1e6:9.1f}")
    print(f"drop vs delete: {delete_s / drop_s:.0f}x faster, "
          f"{delete_wal / max(drop_wal, 1):.0f}x less WAL")  # fmt: skip
    common.dump_json({
        "bench": "retention", "rows": args.rows, "batch": args.batch,
        "drop": {"seconds": round(drop_s, 3), "wal_bytes": drop_wal},
        "delete": {"seconds": round(delete_s, 3), "wal_bytes": delete_wal},
        "vacuum_after_delete": {"seconds": round(vacuum_s, 3), "wal_bytes": vacuum_wal},
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
