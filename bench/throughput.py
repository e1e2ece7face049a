"""Steps per second through real Celery worker processes: 1,000 runs of 10 no-op steps.

    .venv/bin/python bench/throughput.py [--runs 1000] [--workers 1,2,4] [--rounds 3]
                                         [--pool solo|prefork] [--celery-app config]

For each worker count N the bench makes the runs (agents.runtime.services.run_start, enqueue held
back), starts the workers and waits until they are ready, then enqueues every run on a
queue of its own and times from the first enqueue to the last run's `finished_at`
(PostgreSQL's clock, same host). Settings are the defaults a deployment has (time slice
5 s, so a 10-step run is one task). Worker counts alternate in order across rounds.

--pool solo (default): N separate `celery worker --pool=solo` processes, one process that
claims and steps each, as when workers scale out on more machines. --pool prefork: one
worker with --concurrency N (a parent that feeds N forked children).

Besides steps/s it reports, per step, transactions that wrote (xids), WAL bytes and WAL
fsyncs (pg_stat_io, all backend kinds): fsyncs/step below xacts/step means concurrent runs
shared commits (group commit); and MultiXacts created per step (pg_waldump of the run's
WAL): concurrent transactions taking FOR KEY SHARE on the same row, here the tenant row
that the child tables' foreign keys lock. CPU ms/step: CPU time of PostgreSQL (all its
processes, backends that exited included), of the worker processes and of Redis, per step;
busy: the machine's busy share meanwhile (2 cores; other sessions' load included).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as common  # noqa: E402

STEPS = 10


def wal_fsyncs(monitor: common.Monitor) -> int:
    row = monitor.conn.execute(
        "SELECT coalesce(sum(fsyncs), 0)::bigint FROM pg_stat_io WHERE object = 'wal'"
    ).fetchone()
    return int(row[0])


def one_config(tenant, *, workers: int, runs: int, pool: str, app: str) -> dict:
    from agents.runtime.tasks import run_step
    from bench._noop_agent import agent_name
    from config.celery import app as celery_app

    run_ids = common.create_runs(tenant, agent_name(STEPS), runs)
    queue = f"bench-tp-{uuid.uuid4().hex[:8]}"
    poll = common.super_connect("agentstate")
    monitor = common.Monitor()
    kwargs = (
        {"pool": "solo", "concurrency": 1}
        if pool == "solo"
        else {"pool": "prefork", "concurrency": workers}
    )
    count = workers if pool == "solo" else 1
    with common.workers(
        count,
        queue=queue,
        label=f"bench-tp{workers}-",
        env=common.worker_env(),
        app=app,
        **kwargs,
    ) as procs:
        monitor.conn.execute("SELECT pg_stat_force_next_flush()")
        fsyncs_before = wal_fsyncs(monitor)
        before, lsn0 = monitor.snapshot(), monitor.lsn()
        cpu = common.CpuMeter([p.pid for p in procs])
        wall0 = time.time()
        t0 = time.perf_counter()
        with celery_app.producer_or_acquire() as producer:
            for run_id in run_ids:
                run_step.apply_async(
                    kwargs={"tenant_id": str(tenant.pk), "run_id": run_id},
                    queue=queue,
                    producer=producer,
                )
        enqueue_s = time.perf_counter() - t0
        deadline = t0 + 600
        while True:
            done, bad, last = poll.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'),"
                " count(*) FILTER (WHERE status IN ('failed', 'cancelled')),"
                " extract(epoch FROM max(finished_at))"
                " FROM agents_run WHERE id = ANY(%s::uuid[])",
                [run_ids],
            ).fetchone()
            if done == runs:
                break
            if bad or time.perf_counter() > deadline:
                raise RuntimeError(f"{bad} runs failed / timed out; see var/bench-logs")
            time.sleep(0.1)
        after, lsn1 = monitor.snapshot(), monitor.lsn()
        used = cpu.stop()
        claims = poll.execute(
            # every attempt: those that wrote a checkpoint, and those that did not
            "SELECT (SELECT count(*) FROM agents_stepattempt WHERE run_id = ANY(%(ids)s::uuid[]))"
            " + (SELECT count(*) FROM agents_checkpoint"
            "     WHERE run_id = ANY(%(ids)s::uuid[]) AND attempt IS NOT NULL)",
            {"ids": run_ids},
        ).fetchone()[0]
    # The workers' backends have exited (Celery closes them per task anyway), so their I/O
    # statistics are flushed; give the WAL writer's a moment too.
    time.sleep(1.5)
    monitor.conn.execute("SELECT pg_stat_force_next_flush()")
    fsyncs = wal_fsyncs(monitor) - fsyncs_before
    monitor.close()
    poll.close()
    seconds = float(last) - wall0
    steps = runs * STEPS
    delta = common.Monitor.delta(before, after)
    records = common.wal_records(lsn0, lsn1)
    common.cleanup_tenant(tenant)
    return {
        "workers": workers,
        "pool": pool,
        "runs": runs,
        "steps": steps,
        "attempt_rows": int(claims),
        "seconds": round(seconds, 3),
        "steps_per_s": round(steps / seconds, 1),
        "runs_per_s": round(runs / seconds, 1),
        "enqueue_s": round(enqueue_s, 3),
        "write_xacts_per_step": round(delta["write_xacts"] / steps, 3),
        "wal_bytes_per_step": round(delta["wal_bytes"] / steps, 1),
        "wal_fsyncs_per_step": round(fsyncs / steps, 3),
        "multixacts_per_step": round(records.get("MultiXact/CREATE_ID", 0) / steps, 3),
        "heap_locks_per_step": round(records.get("Heap/LOCK", 0) / steps, 3),
        "cpu_ms_per_step": {
            k: round(v * 1000 / steps, 3) for k, v in used.items() if k != "machine_busy_share"
        },
        "machine_busy_share": round(used["machine_busy_share"], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool", choices=("solo", "prefork"), default="solo")
    parser.add_argument(
        "--celery-app",
        default="config",
        help="Celery app module for the workers (bench/_celery_reuse_db.py is a what-if)",
    )
    args = parser.parse_args()
    common.setup_django()
    server = common.assert_durable()
    counts = [int(n) for n in args.workers.split(",")]
    tenant = common.bench_tenant("throughput")
    results: list[dict] = []
    started = time.perf_counter()
    try:
        for round_no in range(args.rounds):
            order = counts if round_no % 2 == 0 else list(reversed(counts))
            for workers in order:
                result = one_config(
                    tenant, workers=workers, runs=args.runs, pool=args.pool, app=args.celery_app
                )
                result["round"] = round_no + 1
                results.append(result)
                print(
                    f"  round {round_no + 1}, {workers} worker(s): "
                    f"{result['steps_per_s']:.0f} steps/s",
                    flush=True,
                )
    finally:
        common.cleanup_tenant(tenant)
    elapsed = time.perf_counter() - started

    summary = {}
    print(
        f"\n{args.runs} runs x {STEPS} no-op steps through Celery ({args.pool} pool, app "
        f"{args.celery_app}), enqueue of all -> last finished_at"
    )
    head = (
        f"{'workers':>7}{'round':>6}{'seconds':>9}{'steps/s':>9}{'runs/s':>8}{'enqueue s':>10}"
        f"{'xact/step':>10}{'fsync/step':>11}{'WAL B/step':>11}{'mxact/step':>11}"
        f"{'CPU ms/step: pg':>16}{'workers':>8}{'redis':>6}{'busy':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in sorted(results, key=lambda r: (r["workers"], r["round"])):
        print(
            f"{r['workers']:>7}{r['round']:>6}{r['seconds']:>9.2f}{r['steps_per_s']:>9.0f}"
            f"{r['runs_per_s']:>8.0f}{r['enqueue_s']:>10.2f}{r['write_xacts_per_step']:>10.2f}"
            f"{r['wal_fsyncs_per_step']:>11.2f}{r['wal_bytes_per_step']:>11.0f}"
            f"{r['multixacts_per_step']:>11.2f}{r['cpu_ms_per_step']['postgres']:>16.2f}"
            f"{r['cpu_ms_per_step']['workers']:>8.2f}{r['cpu_ms_per_step']['redis']:>6.2f}"
            f"{r['machine_busy_share']:>6.0%}"
        )
    print("\nmedian over rounds")
    base = None
    for workers in counts:
        rows = [r for r in results if r["workers"] == workers]
        sps = common.median([r["steps_per_s"] for r in rows])
        base = base or sps
        summary[str(workers)] = {
            "steps_per_s_median": round(sps, 1),
            "runs_per_s_median": round(common.median([r["runs_per_s"] for r in rows]), 1),
            "speedup_vs_1": round(sps / base, 2),
            "wal_fsyncs_per_step_median": round(
                common.median([r["wal_fsyncs_per_step"] for r in rows]), 3
            ),
        }
        print(
            f"  {workers} worker(s): {sps:7.0f} steps/s   x{sps / base:.2f} vs 1 worker   "
            f"fsync/step {summary[str(workers)]['wal_fsyncs_per_step_median']:.2f}"
        )
    print(f"\n{elapsed:.0f} s in all; server {server}")
    common.dump_json(
        {
            "bench": "throughput",
            "runs": args.runs,
            "steps_per_run": STEPS,
            "pool": args.pool,
            "celery_app": args.celery_app,
            "rounds": args.rounds,
            "summary": summary,
            "results": results,
            "server": server,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
