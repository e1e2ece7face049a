"""The same 20-step no-op workflow written for the raw floor and for the peers (LangGraph +
PostgresSaver, DBOS), each on the embedded PostgreSQL in a scratch database of its own.

Every class exposes `run_once() -> None` (one whole workflow of `steps` no-op steps, durable
after each step) and `pgconns() -> list` (psycopg connections to trace).
"""

from __future__ import annotations

import uuid
from typing import Any

from bench._common import ensure_database, super_connect, super_url

BENCH_DB = "bench"
DBOS_DB = "bench_dbos"


class RawFloor:
    """Straight psycopg 3: per step one transaction holding a conditional UPDATE of the run
    row (fenced on its version) and one INSERT of a checkpoint row.

    one_round_trip=False: BEGIN, UPDATE, INSERT, COMMIT (4 round trips), as written by hand.
    one_round_trip=True: both statements in one CTE in autocommit (1 round trip), the same
    shape as the engine's persist statement.
    """

    def __init__(self, steps: int, *, one_round_trip: bool, database: str = BENCH_DB) -> None:
        import psycopg

        ensure_database(database)
        self.steps = steps
        self.one_round_trip = one_round_trip
        self.conn = psycopg.connect(
            super_url(database), autocommit=True, options="-c search_path=raw"
        )
        self.conn.execute("CREATE SCHEMA IF NOT EXISTS raw")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS run (id uuid PRIMARY KEY, step int NOT NULL,"
            " version int NOT NULL, status text NOT NULL, updated_at timestamptz NOT NULL)"
        )
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS checkpoint (run_id uuid NOT NULL REFERENCES run(id),"
            " seq int NOT NULL, state jsonb NOT NULL,"
            " created_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
            " PRIMARY KEY (run_id, seq))"
        )

    def truncate(self) -> None:
        self.conn.execute("TRUNCATE checkpoint, run")

    def pgconns(self) -> list[Any]:
        return [self.conn.pgconn]

    def run_once(self) -> None:
        from psycopg.types.json import Jsonb

        run_id = uuid.uuid4()
        self.conn.execute(
            "INSERT INTO run (id, step, version, status, updated_at)"
            " VALUES (%s, 0, 0, 'running', clock_timestamp())",
            [run_id],
        )
        cur = self.conn.cursor()
        for seq in range(1, self.steps + 1):
            status = "succeeded" if seq == self.steps else "running"
            state = Jsonb({"i": seq})
            if self.one_round_trip:
                cur.execute(
                    "WITH r AS (UPDATE run SET step = %(seq)s, version = version + 1,"
                    " status = %(status)s, updated_at = clock_timestamp()"
                    " WHERE id = %(run)s AND version = %(version)s RETURNING id)"
                    " INSERT INTO checkpoint (run_id, seq, state)"
                    " SELECT r.id, %(seq)s, %(state)s FROM r RETURNING seq",
                    {
                        "seq": seq,
                        "status": status,
                        "run": run_id,
                        "version": seq - 1,
                        "state": state,
                    },
                )
                if cur.fetchone() is None:
                    raise RuntimeError("fenced")
            else:
                with self.conn.transaction():
                    cur.execute(
                        "UPDATE run SET step = %s, version = version + 1, status = %s,"
                        " updated_at = clock_timestamp() WHERE id = %s AND version = %s",
                        [seq, status, run_id, seq - 1],
                    )
                    if cur.rowcount != 1:
                        raise RuntimeError("fenced")
                    cur.execute(
                        "INSERT INTO checkpoint (run_id, seq, state) VALUES (%s, %s, %s)",
                        [run_id, seq, state],
                    )

    def close(self) -> None:
        self.conn.close()


def _chain_graph(steps: int, checkpointer: Any) -> Any:
    """A StateGraph of `steps` no-op nodes in a chain, compiled with `checkpointer`."""
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        i: int

    def noop(state: State) -> dict:
        return {"i": state["i"] + 1}

    graph = StateGraph(State)
    names = [f"n{index}" for index in range(steps)]
    for name in names:
        graph.add_node(name, noop)
    graph.add_edge(START, names[0])
    for a, b in zip(names, names[1:], strict=False):
        graph.add_edge(a, b)
    graph.add_edge(names[-1], END)
    return graph.compile(checkpointer=checkpointer)


class LangGraphPeer:
    """LangGraph: a StateGraph of `steps` no-op nodes in a chain, PostgresSaver checkpointer
    on its own connection (autocommit, prepare_threshold=0, dict rows, as its docs ask)."""

    def __init__(self, steps: int, *, durability: str | None) -> None:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        ensure_database(BENCH_DB)
        with super_connect(BENCH_DB) as admin:
            admin.execute("CREATE SCHEMA IF NOT EXISTS langgraph")
        self.conn = psycopg.connect(
            super_url(BENCH_DB),
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options="-c search_path=langgraph",
        )
        self.saver = PostgresSaver(self.conn)
        self.saver.setup()
        self.graph = _chain_graph(steps, self.saver)
        self.durability = durability
        self.steps = steps

    def truncate(self) -> None:
        self.conn.execute("TRUNCATE checkpoints, checkpoint_blobs, checkpoint_writes")

    def pgconns(self) -> list[Any]:
        return [self.conn.pgconn]

    def run_once(self) -> None:
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        kwargs = {} if self.durability is None else {"durability": self.durability}
        out = self.graph.invoke({"i": 0}, config, **kwargs)
        if out["i"] != self.steps:
            raise RuntimeError(f"langgraph returned {out}")

    def close(self) -> None:
        self.conn.close()


class LangGraphAgentStatePeer(LangGraphPeer):
    """The same graph with `AgentStateSaver` (sdk/python): every checkpoint and write an HTTP
    request to an AgentState server (uvicorn, one process) on the same machine."""

    def __init__(self, steps: int, *, url: str, api_key: str, durability: str | None) -> None:
        from agentstate_client import AgentStateSaver

        self.saver = AgentStateSaver(url, api_key)
        self.graph = _chain_graph(steps, self.saver)
        self.durability = durability
        self.steps = steps

    def truncate(self) -> None:
        pass

    def pgconns(self) -> list[Any]:
        return []  # the server's connections are in another process

    def close(self) -> None:
        self.saver._client.close()


class DBOSPeer:
    """DBOS: one @DBOS.workflow calling a @DBOS.step `steps` times; its system database
    (`bench_dbos`, recreated at start) lives on the same server."""

    _registered: dict[str, Any] = {}

    def __init__(self, steps: int) -> None:
        from dbos import DBOS

        with super_connect("postgres") as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{DBOS_DB}" WITH (FORCE)')
        ensure_database(DBOS_DB)
        if not self._registered:

            @DBOS.step()
            def bench_noop_step(i: int) -> int:
                return i + 1

            @DBOS.workflow()
            def bench_noop_workflow(n: int) -> int:
                i = 0
                for _ in range(n):
                    i = bench_noop_step(i)
                return i

            self._registered["workflow"] = bench_noop_workflow
        self.dbos = DBOS(
            config={
                "name": "agentstate-bench",
                "system_database_url": super_url(DBOS_DB),
                "log_level": "WARNING",
            }
        )
        DBOS.launch()
        self.steps = steps
        self._traced: list[Any] = []

    def pgconns(self) -> list[Any]:
        return []  # traced through the pool's checkout event instead, see trace_pool()

    def trace_pool(self, trace) -> Any:
        """Trace every pooled connection DBOS checks out while the trace is on."""
        from sqlalchemy import event
        from sqlalchemy.pool import Pool

        def on_checkout(dbapi_connection, _record, _proxy) -> None:
            pgconn = getattr(dbapi_connection, "pgconn", None)
            if pgconn is not None:
                trace.attach(pgconn)

        event.listen(Pool, "checkout", on_checkout)
        return lambda: event.remove(Pool, "checkout", on_checkout)

    def run_once(self) -> None:
        result = self._registered["workflow"](self.steps)
        if result != self.steps:
            raise RuntimeError(f"dbos returned {result}")

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy(destroy_registry=False)


def describe_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in (
        "langgraph",
        "langgraph-checkpoint-postgres",
        "dbos",
        "psycopg",
        "celery",
        "Django",
    ):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "missing"
    return found
