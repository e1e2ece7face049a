"""A/B of the LangGraph door between two code trees: one uvicorn server per tree (both on the
embedded database, served as production serves them), the same 20-step graph through
AgentStateSaver run against each in alternating rounds, so the machine's drift falls on both
alike. Not run by `make bench` (a helper: it needs a second checkout).

    git worktree add /tmp/base HEAD~1
    .venv/bin/python bench/_langgraph_ab.py /tmp/base "$PWD" [sync|async] [rounds]
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as common  # noqa: E402


def main() -> int:
    trees = {"A": sys.argv[1], "B": sys.argv[2]}
    durability = sys.argv[3] if len(sys.argv) > 3 else "sync"
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 15
    os.environ["MEMORY_WARM_QUERY_MODEL"] = "0"
    common.setup_django()
    from agentstate_client import AgentStateSaver

    from bench._peers import _chain_graph

    tenant = common.bench_tenant("lgab")
    key = common.api_key_for(tenant)
    samples: dict[str, list[float]] = {name: [] for name in trees}

    def run(graph) -> float:
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        t0 = time.perf_counter()
        graph.invoke({"i": 0}, config, durability=durability)
        return (time.perf_counter() - t0) / 20 * 1000

    try:
        with contextlib.ExitStack() as servers:
            graphs = {
                name: _chain_graph(
                    20,
                    AgentStateSaver(
                        servers.enter_context(
                            common.asgi_server(f"langgraph-ab-{name}", debug=False, tree=tree)
                        ),
                        api_key=key,
                    ),
                )
                for name, tree in trees.items()
            }
            for graph in graphs.values():
                for _ in range(3):
                    run(graph)
            for round_no in range(rounds):
                for name in ["A", "B"] if round_no % 2 == 0 else ["B", "A"]:
                    samples[name] += [run(graphs[name]) for _ in range(4)]
    finally:
        print(common.cleanup_tenant(tenant))
    for name, tree in trees.items():
        q1, _, q3 = statistics.quantiles(samples[name], n=4)
        med = statistics.median(samples[name])
        print(f"{name} {tree} {durability}: median {med:.3f} ms/step (p25 {q1:.3f}, p75 {q3:.3f})")
    ratio = statistics.median(samples["B"]) / statistics.median(samples["A"])
    print(f"B/A {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
