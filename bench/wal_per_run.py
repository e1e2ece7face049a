"""WAL written per demo refund run and per step, with and without the two indexes the unique
keys cover (agents 0023 dropped them; this bench puts them back for its "with" rounds).

    .venv/bin/python bench/wal_per_run.py [--runs 30] [--rounds 3]

Each run: a conversation with the demo refund desk ("Please refund $40 for order A-1002",
no approval needed) driven to its end in this process (drive(), the demo's payment provider
in process), alone on the embedded PostgreSQL; WAL is the cluster's LSN difference over the
runs, divided by runs and by steps, plus the B-tree entries written (pg_waldump). Rounds
alternate "with" and "without" the indexes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as common  # noqa: E402

INDEXES = {
    "agents_message_session_id_eb486117": "agents_message (session_id)",
    "agents_toolcall_run_id_1a8efdb2": "agents_toolcall (run_id)",
}


def _lsn(conn) -> str:
    return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]


def _demo_runs(tenant, count: int) -> tuple[int, int]:
    """Drive `count` demo runs to their end; (runs that succeeded, steps)."""
    from agents.runtime.engine.runner import drive
    from agents.runtime.models import Run
    from agents.runtime.services import conversation_start
    from tenants.scope import tenant_scope

    principal = common.principal_for(tenant)
    done = steps = 0
    for _ in range(count):
        with common.no_enqueue(), tenant_scope(tenant.pk):
            run = conversation_start(
                principal=principal,
                agent="refund_desk",
                message="Please refund $40 for order A-1002",
                title="bench",
            )
        for _ in range(20):
            drive(tenant_id=str(tenant.pk), run_id=run.pk, worker="bench", slice_seconds=3600)
            with tenant_scope(tenant.pk):
                fresh = Run.objects.get(pk=run.pk)
            if fresh.is_finished:
                break
        done += fresh.status == "succeeded"
        steps += fresh.step_seq
    return done, steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    common.setup_django()
    common.assert_durable()
    import agents.demo.refund_desk  # noqa: F401  (the demo agent and its tools)
    from agents.runtime import tools

    tool = tools.get_tool("issue_refund")
    made = []

    def refund(**kwargs):  # the demo's payment provider, in process
        made.append(kwargs)
        return {
            "refund_id": f"re_{len(made)}",
            "order": kwargs["order"],
            "amount": kwargs["amount"],
        }

    import dataclasses

    tools._TOOLS["issue_refund"] = dataclasses.replace(tool, fn=refund)
    conn = common.super_connect("agentstate")
    tenant = common.bench_tenant("wal")
    totals = {"with": [0, 0, 0, 0], "without": [0, 0, 0, 0]}  # bytes, runs, steps, btree
    try:
        _demo_runs(tenant, 3)  # warm up
        for _ in range(args.rounds):
            for variant in ("with", "without"):
                for name, target in INDEXES.items():
                    if variant == "with":
                        conn.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {target}")
                    else:
                        conn.execute(f"DROP INDEX IF EXISTS {name}")
                conn.execute("CHECKPOINT")  # full-page images start afresh for both
                start = _lsn(conn)
                runs, steps = _demo_runs(tenant, args.runs)
                end = _lsn(conn)
                size = conn.execute("SELECT %s::pg_lsn - %s::pg_lsn", [end, start]).fetchone()[0]
                records = common.wal_records(start, end)
                total = totals[variant]
                total[0] += int(size)
                total[1] += runs
                total[2] += steps
                total[3] += common.btree_inserts(records)
    finally:
        for name in INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
        common.cleanup_tenant(tenant)
    print(f"\ndemo refund runs ({args.runs} x {args.rounds} rounds per variant), alone")
    head = ("indexes", "runs", "steps/run", "WAL B/run", "WAL B/step", "idx ins/run")
    print("{:<28}{:>6}{:>11}{:>11}{:>12}{:>13}".format(*head))
    result = {}
    for variant, (size, runs, steps, btree) in totals.items():
        label = "with the two (before 0023)" if variant == "with" else "without (now)"
        per_run, per_step = size / max(runs, 1), size / max(steps, 1)
        n = max(runs, 1)
        print(
            f"{label:<28}{runs:>6}{steps / n:>11.1f}{per_run:>11.0f}{per_step:>12.0f}"
            f"{btree / n:>13.1f}"
        )
        result[variant] = {
            "runs": runs,
            "wal_bytes_per_run": round(per_run),
            "wal_bytes_per_step": round(per_step),
            "btree_inserts_per_run": round(btree / max(runs, 1), 1),
        }
    common.dump_json({"bench": "wal_per_run", **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
