"""Bulk memory writes over HTTP: `POST /api/v1/memory/subjects/{id}/facts:batch` against the
single-fact POST, end to end (client, uvicorn, Django, PostgreSQL, the embedding enqueue).

    .venv/bin/python bench/memory_batch.py [--rounds 10] [--batch 500] [--singles 20] [--keep]

One AgentState server (uvicorn, one process, `bench._common.asgi_server`) on the embedded
servers, one read/write API key of a fresh bench tenant, one keep-alive HTTP connection. Each
round posts one batch of `--batch` facts about a fresh member (spread over the four built-in
categories, so no category cap is reached; every tenth fact has a key of its own) and then
`--singles` single POSTs about another member; batches and singles alternate so that both
see the same machine. Every fact is new text, so each is a real insert plus an embedding
enqueue (the provider stays `local`; no worker runs, the tasks wait in the bench's Redis; the
web process does not load the query model, which writes never use).

Reports facts/s per batch (p50) and overall (all batch facts / all batch time), the single
POST's facts/s overall and its p50 latency. Target: batch facts/s overall >= 200. The bench
tenant's facts are deleted at the end (unless --keep). Ends with one JSON line; exits 1 if
the target is missed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

from bench._common import (  # noqa: E402
    CATEGORIES,
    WORDS,
    api_key_for,
    asgi_server,
    assert_durable,
    bench_tenant,
    dump_json,
    median,
    p95,
    setup_django,
)

TARGET_FACTS_PER_S = 200


def sentence(n: int, tag: str) -> str:
    """A distinct, harmless fact (no long digit runs: nothing the secret check refuses)."""
    words = [WORDS[(n * 7 + i * 3) % len(WORDS)] for i in range(4)]
    return f"Said on visit {tag}-{n} that they care about {', '.join(words)}"


def facts(count: int, tag: str) -> list[dict]:
    return [
        {
            "category": CATEGORIES[n % len(CATEGORIES)],
            "text": sentence(n, tag),
            **({"key": f"slot.{tag}.{n}"} if n % 10 == 0 else {}),
        }
        for n in range(count)
    ]


def member(tenant):
    from tenants.services import membership_add, user_create

    user = user_create(username=f"bench-mem-{uuid.uuid4().hex[:10]}", password=None)
    membership_add(tenant=tenant, user=user, role="member", actor_label="bench")
    return user


def post(http, path: str, body: dict, expect: int) -> tuple[float, dict]:
    started = time.perf_counter()
    response = http.post(path, json=body)
    elapsed = time.perf_counter() - started
    if response.status_code != expect:
        raise SystemExit(f"{path}: {response.status_code} {response.text[:500]}")
    return elapsed, response.json()


def run(args: argparse.Namespace, tenant, key: str) -> dict:
    import httpx

    logging.getLogger("httpx").setLevel(logging.WARNING)  # no line per request
    single_user = member(tenant)
    batch_users = [member(tenant) for _ in range(args.rounds + 1)]
    os.environ["MEMORY_WARM_QUERY_MODEL"] = "0"  # asgi_server passes os.environ on
    batch_s: list[float] = []
    single_s: list[float] = []
    with asgi_server("bench-memory-batch") as url:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
            single_path = f"/api/v1/memory/subjects/{single_user.pk}/facts"
            # Warm-up (not counted): first requests, connection, the server's imports.
            post(http, f"/api/v1/memory/subjects/{batch_users[0].pk}/facts:batch",
                 {"facts": facts(50, "warm")}, 200)  # fmt: skip
            for item in facts(5, "warm"):
                post(http, single_path, item, 201)
            for rnd in range(args.rounds):
                path = f"/api/v1/memory/subjects/{batch_users[rnd + 1].pk}/facts:batch"
                elapsed, body = post(http, path, {"facts": facts(args.batch, f"b{rnd}")}, 200)
                if body["created"] != args.batch:
                    raise SystemExit(
                        f"batch {rnd}: {body['created']} created, {body['refused']} refused"
                    )
                batch_s.append(elapsed)
                for item in facts(args.singles, f"s{rnd}"):
                    single_s.append(post(http, single_path, item, 201)[0])
    batch_rates = [args.batch / s for s in batch_s]
    return {
        "batch_size": args.batch,
        "batches": len(batch_s),
        "batch_facts": args.batch * len(batch_s),
        "batch_ms_p50": median(batch_s) * 1000,
        "batch_ms_p95": p95(batch_s) * 1000,
        "batch_facts_per_s_p50": median(batch_rates),
        "batch_facts_per_s_overall": args.batch * len(batch_s) / sum(batch_s),
        "single_posts": len(single_s),
        "single_ms_p50": median(single_s) * 1000,
        "single_ms_p95": p95(single_s) * 1000,
        "single_facts_per_s_overall": len(single_s) / sum(single_s),
    }


def cleanup(tenant) -> str:
    from memory.models import MemoryFact
    from tenants.scope import tenant_scope

    with tenant_scope(tenant.pk):
        deleted, _ = MemoryFact.objects.for_tenant(tenant).delete()
    return f"deleted the {deleted} facts of tenant {tenant.slug}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--singles", type=int, default=20)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    setup_django()
    durable = assert_durable()
    tenant = bench_tenant("memory-batch")
    key = api_key_for(tenant)
    try:
        result = run(args, tenant, key)
    finally:
        note = "kept the facts" if args.keep else cleanup(tenant)
    ok = result["batch_facts_per_s_overall"] >= TARGET_FACTS_PER_S
    speedup = result["batch_facts_per_s_overall"] / result["single_facts_per_s_overall"]
    rows = [
        (f"POST …/facts:batch ({args.batch})", result["batches"], result["batch_facts"],
         result["batch_ms_p50"], result["batch_ms_p95"], result["batch_facts_per_s_p50"],
         result["batch_facts_per_s_overall"]),
        ("POST …/facts (one fact)", result["single_posts"], result["single_posts"],
         result["single_ms_p50"], result["single_ms_p95"], 1000 / result["single_ms_p50"],
         result["single_facts_per_s_overall"]),
    ]  # fmt: skip
    print(
        "\nMemory writes over HTTP, one uvicorn process, one connection "
        f"(fsync {durable['fsync']}, synchronous_commit {durable['synchronous_commit']})"
    )
    print(f"{'endpoint':<30}{'requests':>9}{'facts':>7}{'p50 ms':>9}{'p95 ms':>9}"
          f"{'facts/s p50':>13}{'facts/s all':>13}")  # fmt: skip
    for name, requests, count, ms50, ms95, rate50, rate in rows:
        print(
            f"{name:<30}{requests:>9}{count:>7}{ms50:>9.1f}{ms95:>9.1f}{rate50:>13.0f}{rate:>13.0f}"
        )
    print(
        f"batch / single facts/s: {speedup:.1f}x; target batch >= {TARGET_FACTS_PER_S} facts/s: "
        f"{'met' if ok else 'MISSED'}; {note}"
    )
    dump_json({"bench": "memory_batch", **result, "speedup": speedup,
               "target_facts_per_s": TARGET_FACTS_PER_S, "target_met": ok})  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
