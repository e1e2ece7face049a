"""Per-step cost of a LangGraph graph checkpointed through AgentState (`AgentStateSaver`, over
HTTP to a uvicorn server on this machine) against LangGraph's own PostgresSaver and
InMemorySaver, for each durability mode, in the same run.

    .venv/bin/python bench/langgraph_saver.py [--rounds 10] [--runs-per-round 3] [--steps 20]
                                              [--durability async,sync,exit] [--api sync|async]

A run is one `graph.invoke` (or `ainvoke` with --api async) of a StateGraph of `steps` no-op
nodes in a chain on a fresh thread. Variants alternate in rounds (each round runs every
variant, in a rotated order) because the machine is shared and noisy; a sample is one run's
time / steps. The server is one uvicorn process serving the project as production does
(DEBUG off, without loading the embedding model it would not use) on the embedded
PostgreSQL, with the default rate limits of the langgraph bucket.
"HTTP/step" counts the saver's requests over the timed runs.

Target: AgentStateSaver at most 2x PostgresSaver per step, for durability async and sync.
Exits 1 if it is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as common  # noqa: E402

TARGET_VS_POSTGRES = 2.0
JUDGED = ("async", "sync")
SAVERS = {
    "agentstate": "AgentStateSaver (HTTP)",
    "postgres": "PostgresSaver",
    "memory": "InMemorySaver",
}


class Variant:
    def __init__(
        self,
        saver_kind: str,
        durability: str,
        saver: Any,
        steps: int,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        from bench._peers import _chain_graph

        self.saver_kind = saver_kind
        self.durability = durability
        self.saver = saver
        self.steps = steps
        self.graph = _chain_graph(steps, saver)
        self.loop = loop  # --api async: every variant's ainvoke on one loop

    @property
    def requests(self) -> int:
        """HTTP requests its saver has sent so far (AgentStateSaver only)."""
        client = getattr(self.saver, "_client", None)
        return client.requests_sent if client is not None else 0

    @property
    def label(self) -> str:
        return f"{SAVERS[self.saver_kind]}, durability={self.durability}"

    def run_once(self) -> None:
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        if self.loop is not None:
            out = self.loop.run_until_complete(
                self.graph.ainvoke({"i": 0}, config, durability=self.durability)
            )
        else:
            out = self.graph.invoke({"i": 0}, config, durability=self.durability)
        if out["i"] != self.steps:
            raise RuntimeError(f"{self.label} returned {out}")


def _postgres_saver(loop: asyncio.AbstractEventLoop | None) -> tuple[Any, Any]:
    """PostgresSaver on its own connection as its docs ask (autocommit, prepare_threshold=0,
    dict rows); AsyncPostgresSaver on an async connection for --api async."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row

    from bench._peers import BENCH_DB

    common.ensure_database(BENCH_DB)
    with common.super_connect(BENCH_DB) as admin:
        admin.execute("CREATE SCHEMA IF NOT EXISTS langgraph")
    options = {
        "autocommit": True,
        "prepare_threshold": 0,
        "row_factory": dict_row,
        "options": "-c search_path=langgraph",
    }
    conn = psycopg.connect(common.super_url(BENCH_DB), **options)
    saver = PostgresSaver(conn)
    saver.setup()
    conn.execute("TRUNCATE checkpoints, checkpoint_blobs, checkpoint_writes")
    if loop is None:
        return saver, conn
    conn.close()

    async def connect() -> tuple[Any, Any]:
        aconn = await psycopg.AsyncConnection.connect(common.super_url(BENCH_DB), **options)
        return AsyncPostgresSaver(aconn), aconn  # it wants to be made on its loop

    asaver, aconn = loop.run_until_complete(connect())
    return asaver, _Closer(loop, aconn)


class _Closer:
    def __init__(self, loop: asyncio.AbstractEventLoop, aconn: Any) -> None:
        self.loop, self.aconn = loop, aconn

    def close(self) -> None:
        self.loop.run_until_complete(self.aconn.close())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs-per-round", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--durability", default="async,sync,exit")
    parser.add_argument("--api", choices=("sync", "async"), default="sync")
    args = parser.parse_args()

    # The server answers no memory search here: it does not load the embedding model at
    # start (a one-off that competes with the first seconds of timing on 2 cores).
    os.environ["MEMORY_WARM_QUERY_MODEL"] = "0"
    common.setup_django()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a log line per request otherwise
    server_settings = common.assert_durable()
    from agentstate_client import AgentStateSaver
    from langgraph.checkpoint.memory import InMemorySaver

    from bench._peers import describe_versions

    durabilities = args.durability.split(",")
    tenant = common.bench_tenant("lgsaver")
    key = common.api_key_for(tenant)
    loop = asyncio.new_event_loop() if args.api == "async" else None
    pg_saver, pg_conn = _postgres_saver(loop)
    samples: dict[tuple[str, str], list[float]] = {}
    variants: dict[tuple[str, str], Variant] = {}
    started = time.perf_counter()
    with common.asgi_server("bench-langgraph-saver", debug=False) as url:
        ours = []
        for durability in durabilities:
            # A saver (and its connections) per variant, so its requests are its own.
            ours.append(AgentStateSaver(url, api_key=key))
            for kind, saver in (("agentstate", ours[-1]), ("postgres", pg_saver)):
                variants[(kind, durability)] = Variant(kind, durability, saver, args.steps, loop)
            variants[("memory", durability)] = Variant(
                "memory", durability, InMemorySaver(), args.steps, loop
            )
        http_counts: dict[tuple[str, str], int] = {k: 0 for k in variants}
        try:
            for variant in variants.values():
                for _ in range(2):  # warm-up: connections, caches, the server's first requests
                    variant.run_once()
            order = list(variants)
            for round_no in range(args.rounds):
                shift = round_no % len(order)
                for name in order[shift:] + order[:shift]:
                    variant = variants[name]
                    for _ in range(args.runs_per_round):
                        before = variant.requests
                        t0 = time.perf_counter()
                        variant.run_once()
                        samples.setdefault(name, []).append(
                            (time.perf_counter() - t0) * 1000 / args.steps
                        )
                        http_counts[name] += variant.requests - before
        finally:
            for saver in ours:
                if loop is not None:
                    loop.run_until_complete(saver.aclose())
                else:
                    saver.close()
            pg_conn.close()
            cleanup = common.cleanup_tenant(tenant)
    elapsed = time.perf_counter() - started

    runs = args.rounds * args.runs_per_round
    head = f"{'saver, durability':<44}{'median':>9}{'p95':>9}{'HTTP/step':>11}{'vs PG':>8}"
    print(f"\n{args.steps}-step no-op graph, per step (ms), {args.api} API, alternating rounds")
    print(head)
    print("-" * len(head))
    results: dict[str, dict[str, Any]] = {}
    met: dict[str, bool] = {}
    for durability in durabilities:
        pg = common.median(samples[("postgres", durability)])
        for kind in SAVERS:
            name = (kind, durability)
            values = samples[name]
            med = common.median(values)
            per_step = http_counts[name] / (runs * args.steps) if kind == "agentstate" else None
            ratio = med / pg
            results[f"{kind}_{durability}"] = {
                "label": variants[name].label,
                "median_ms": round(med, 4),
                "p95_ms": round(common.p95(values), 4),
                "http_requests_per_step": None if per_step is None else round(per_step, 3),
                "vs_postgres": round(ratio, 3),
            }
            http = "-" if per_step is None else f"{per_step:.2f}"
            print(
                f"{variants[name].label:<44}{med:>9.3f}{common.p95(values):>9.3f}"
                f"{http:>11}{ratio:>8.2f}"
            )
            if kind == "agentstate" and durability in JUDGED:
                met[f"agentstate_vs_postgres_{durability}"] = ratio <= TARGET_VS_POSTGRES
    print(f"\ntarget: AgentStateSaver <= {TARGET_VS_POSTGRES}x PostgresSaver per step")
    for name, ok in met.items():
        print(f"  {name:<44}{'yes' if ok else 'NO'}")
    print(f"\n{cleanup}; {elapsed:.0f} s; server {server_settings}")
    common.dump_json(
        {
            "bench": "langgraph_saver",
            "steps_per_run": args.steps,
            "runs_per_variant": runs,
            "api": args.api,
            "variants": results,
            "targets": {"agentstate_vs_postgres_max": TARGET_VS_POSTGRES, "judged": JUDGED},
            "met": met,
            "server": server_settings,
            "versions": describe_versions(),
        }
    )
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
