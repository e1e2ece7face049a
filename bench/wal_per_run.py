"""WAL written per demo refund run and per step, and a long tool-calling run's checkpoint
bytes per step.

    .venv/bin/python bench/wal_per_run.py [--runs 40] [--rounds 3] [--turns 50]

Demo runs: a conversation with the demo refund desk ("Please refund $40 for order A-1002", no
approval needed) driven to its end in this process (drive(), the demo's payment provider in
process), alone on the embedded PostgreSQL; WAL is the cluster's LSN difference over the runs,
divided by runs and by steps, plus the B-tree entries written (pg_waldump).

Long runs: a tool agent whose scripted model calls a lookup tool `--turns` times, one call a
turn, then answers (2 x turns + 1 steps). Printed: each checkpoint's bytes (its state and what
it appended to the run's logs, as stored: pg_column_size) at turns 1, 10, 25 and the last, and
the WAL per step over the first and the last ten turns. A run whose checkpoints copy the whole
exchange grows with every turn (bytes per run with the square of the turns); flat is linear.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as common  # noqa: E402

LOOKUP = "bench_wal_lookup"


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


def _long_agent(turns: int) -> str:
    """A tool agent that looks something up `turns` times, one call a turn, then answers."""
    from agents.runtime import ToolAgent, register, tool
    from agents.runtime.llm import ChatResult

    @tool(LOOKUP, description="Look an order up.", parameters={"type": "object"})
    def lookup(**_: object) -> dict:
        return {"order": "A-1001", "amount": "400.00", "charges": 2, "item": "Standing desk"}

    class Model:
        model = "scripted-lookups"

        def chat(self, messages, *, tools=None, on_token=None) -> ChatResult:
            done = sum(1 for m in messages if m.get("role") == "tool")
            if done >= turns:
                return ChatResult(content=f"Looked {done} times.", model=self.model)
            call = {"id": f"call_{done}", "name": LOOKUP, "arguments": {"order": "A-1001"}}
            return ChatResult(content="Checking again.", tool_calls=[call], model=self.model)

    name = f"bench_wal_long_{turns}"
    register(
        ToolAgent(name=name, instructions="Look it up.", tools=[lookup], max_turns=turns + 1,
                  model=Model),
        replace=True,
    )  # fmt: skip
    return name


def _long_runs(conn, tenant, agent: str, count: int) -> dict[str, object]:
    """Drive `count` runs of `agent`, each in one slice as a worker does: (WAL bytes per
    run, steps per run, each checkpoint's average bytes by seq)."""
    from agents.runtime.engine.runner import drive
    from agents.runtime.models import Run
    from agents.runtime.services import run_start
    from tenants.scope import tenant_scope

    principal = common.principal_for(tenant)
    run_ids, wal, steps = [], 0, 0
    for _ in range(count):
        with common.no_enqueue(), tenant_scope(tenant.pk):
            run = run_start(principal=principal, agent=agent, input={"message": "look"})
        run_ids.append(str(run.pk))
        before = _lsn(conn)
        drive(tenant_id=str(tenant.pk), run_id=run.pk, worker="bench", slice_seconds=3600)
        wal += int(conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", [before]).fetchone()[0])
        with tenant_scope(tenant.pk):
            done = Run.objects.get(pk=run.pk)
        assert done.status == "succeeded", done.error
        steps += done.step_seq
    # (a checkpoint of the code before the logs has no `appended`: its state is all of it)
    has_log = conn.execute(
        "SELECT 1 FROM information_schema.columns"
        " WHERE table_name = 'agents_checkpoint' AND column_name = 'appended'"
    ).fetchone()
    size = "pg_column_size(state)" + (" + coalesce(pg_column_size(appended), 0)" if has_log else "")
    sizes = conn.execute(
        f"SELECT seq, avg({size}) FROM agents_checkpoint"
        " WHERE run_id = ANY(%s::uuid[]) GROUP BY seq ORDER BY seq",
        [run_ids],
    ).fetchall()
    return {
        "wal_per_run": wal / count,
        "steps_per_run": steps / count,
        "bytes": {int(seq): float(b) for seq, b in sizes},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--long-runs", type=int, default=3)
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
    size = runs = steps = btree = 0
    try:
        _demo_runs(tenant, 3)  # warm up
        for _ in range(args.rounds):
            conn.execute("CHECKPOINT")  # full-page images start afresh each round
            start = _lsn(conn)
            done, made_steps = _demo_runs(tenant, args.runs)
            end = _lsn(conn)
            size += int(conn.execute("SELECT %s::pg_lsn - %s::pg_lsn", [end, start]).fetchone()[0])
            runs, steps = runs + done, steps + made_steps
            btree += common.btree_inserts(common.wal_records(start, end))
        long = {
            t: _long_runs(conn, tenant, _long_agent(t), args.long_runs) for t in (10, args.turns)
        }
    finally:
        common.cleanup_tenant(tenant)
    n = max(runs, 1)
    print(f"\ndemo refund runs ({args.runs} x {args.rounds} rounds), alone")
    print("{:>6}{:>11}{:>11}{:>12}{:>13}".format("runs", "steps/run", "WAL B/run", "WAL B/step",
                                                 "idx ins/run"))  # fmt: skip
    print(
        f"{runs:>6}{steps / n:>11.1f}{size / n:>11.0f}"
        f"{size / max(steps, 1):>12.0f}{btree / n:>13.1f}"
    )
    turns = args.turns
    per_cp: dict[int, float] = long[turns]["bytes"]  # type: ignore[assignment]
    marks = [t for t in (1, 10, 25, turns) if t <= turns]
    print(f"\na {turns}-turn tool agent ({args.long_runs} runs, {2 * turns + 1} steps each): "
          "checkpoint bytes (state + what it appended) at turn t")  # fmt: skip
    print("{:>8}{:>14}{:>14}".format("turn", "model step", "tools step"))
    for t in marks:  # turn t's model step writes checkpoint 2t-1, its tools step 2t
        print(f"{t:>8}{per_cp.get(2 * t - 1, 0):>14.0f}{per_cp.get(2 * t, 0):>14.0f}")
    print("WAL per step, a run in one slice:")
    for t, one in long.items():
        per_step = one["wal_per_run"] / max(one["steps_per_run"], 1)  # type: ignore[operator]
        print(f"  {t:>3} turns: {one['wal_per_run']:>9.0f} B/run {per_step:>7.0f} B/step")
    common.dump_json({
        "bench": "wal_per_run",
        "demo": {"runs": runs, "wal_bytes_per_run": round(size / n),
                 "wal_bytes_per_step": round(size / max(steps, 1)),
                 "btree_inserts_per_run": round(btree / n, 1)},
        "long": {"turns": turns, "checkpoint_bytes": {t: [round(per_cp.get(2 * t - 1, 0)),
                 round(per_cp.get(2 * t, 0))] for t in marks},
                 "wal_bytes_per_run": {t: round(one["wal_per_run"]) for t, one in long.items()}},
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
