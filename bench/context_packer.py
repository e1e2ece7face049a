"""Context assembly: the packer, building a long session's context, and the hot cache.

1. pack: 1,000 candidate items (turns, tool results, memories, tool schemas; ~150k tokens in
   all, token counts known) into a 128k window with 4k reserved for the output.
   Target: p50 <= 5 ms.
2. build: the context of a 200-turn session (400 messages) with a rolling summary covering
   all but the last 10 turns, and 20 memories, from the hot cache (hit) and from PostgreSQL
   (miss). Memories are given, so no embedding time; no LLM call. Target: p95 <= 20 ms (hit
   and miss).
3. cache: loading a thread (the 200-turn session without a summary: 400 messages) on a hit
   vs a miss.

    .venv/bin/python bench/context_packer.py [--rounds 200]

Exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_tenant, dump_json, median, p95, setup_django  # noqa: E402

PACK_TARGET_P50_MS = 5.0
BUILD_TARGET_P95_MS = 20.0
WORDS = [
    "refund",
    "order",
    "amount",
    "customer",
    "charged",
    "twice",
    "desk",
    "lamp",
    "manager",
    "approve",
    "budget",
]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def candidates_1000(rng: random.Random):
    from agents.conversations.packing import packer
    from agents.conversations.packing.packer import Item

    items = [
        Item(section=packer.SYSTEM, label="System prompt", tokens=400, order=-3, must=True,
             message={"role": "system", "content": "sys"}),
        Item(section=packer.CURRENT, label="Current turn", tokens=200, order=10_000, must=True,
             message={"role": "user", "content": "now"}),
        Item(section=packer.SUMMARY, label="Summary", tokens=1_500, order=-2,
             message={"role": "system", "content": "summary"}),
    ]  # fmt: skip
    for i in range(650):
        section = packer.RECENT if i > 630 else packer.HISTORY
        items.append(
            Item(section=section, label=f"message {i}", tokens=rng.randint(40, 360),
                 order=i, recency=0.5 ** ((650 - i) / 20), priority=0.5,
                 message={"role": "user", "content": "x"})
        )  # fmt: skip
    for i in range(150):
        items.append(
            Item(section=packer.TOOL_RESULT, label=f"tool result {i}", tokens=rng.randint(50, 300),
                 order=i * 4 + 0.5, priority=0.7, recency=0.5 ** ((150 - i) / 10),
                 message={"role": "system", "content": "x"})
        )  # fmt: skip
    for i in range(150):
        items.append(
            Item(section=packer.MEMORY, label=f"memory {i}", tokens=rng.randint(10, 60),
                 order=-1 + i * 1e-6, priority=0.8, relevance=rng.random(),
                 message={"role": "system", "content": "x"})
        )  # fmt: skip
    for i in range(47):
        items.append(
            Item(section=packer.TOOLS, label=f"tool {i}", tokens=rng.randint(60, 200),
                 relevance=rng.random(), tool={"type": "function"})
        )  # fmt: skip
    return items


def bench_pack(rounds: int) -> dict:
    from agents.conversations.packing import packer

    rng = random.Random(7)
    template = candidates_1000(rng)
    assert len(template) == 1000
    times, result = [], None
    for _ in range(rounds):
        items = copy.deepcopy(template)
        t0 = time.perf_counter()
        result = packer.pack(items, window=128_000, reserve_output=4_096)
        times.append((time.perf_counter() - t0) * 1000)
    assert result is not None and result.tokens_used <= result.budget
    included = sum(1 for i in result.items if i.included)
    return {
        "p50_ms": median(times),
        "p95_ms": p95(times),
        "candidates": len(template),
        "candidate_tokens": sum(i.tokens for i in template),
        "included": included,
        "tokens_used": result.tokens_used,
        "budget": result.budget,
    }


def make_session(tenant, turns: int, summary_turns_kept: int | None):
    from agents.runtime.models import AgentSession
    from agents.runtime.services import messages_append
    from tenants.scope import tenant_scope

    rng = random.Random(turns)
    with tenant_scope(tenant.pk):
        session = AgentSession.objects.create(tenant=tenant, agent="refund_desk")
        messages = []
        for i in range(turns):
            messages.append({"role": "user", "content": f"turn {i}: " + sentence(rng, 40)})
            messages.append({"role": "assistant", "content": sentence(rng, 60)})
        messages_append(tenant_id=tenant.pk, session_id=session.pk, run_id=None, messages=messages)
        if summary_turns_kept is not None:
            upto = 2 * (turns - summary_turns_kept)
            AgentSession.objects.filter(pk=session.pk).update(
                summary="\n".join(f"- {sentence(rng, 15)}" for _ in range(40)), summary_upto=upto
            )
    return session


def timed(fn, rounds: int, before=None) -> list[float]:
    times = []
    for _ in range(rounds):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def bench_build(tenant, rounds: int) -> dict:
    from agents.conversations import cache
    from agents.conversations.packing.build import Memory, build_context

    session = make_session(tenant, 200, summary_turns_kept=10)
    rng = random.Random(3)
    memories = [Memory(sentence(rng, 12), "preference", rng.random()) for _ in range(20)]

    def build():
        packed = build_context(
            tenant_id=tenant.pk,
            session_id=session.pk,
            system="You are a refund desk. Decide refunds. " * 10,
            current="Please refund $400 for order A-1001",
            memories=memories,
            model="gpt-4",
        )
        assert packed.messages[1]["content"].startswith("Summary")

    def drop():
        cache.invalidate(tenant_id=tenant.pk, session_id=session.pk)

    build()  # warm the tokenizer and the cache
    hit = timed(build, rounds)
    miss = timed(build, max(rounds // 4, 20), before=drop)
    return {
        "hit_p50_ms": median(hit),
        "hit_p95_ms": p95(hit),
        "miss_p50_ms": median(miss),
        "miss_p95_ms": p95(miss),
    }


def bench_cache(tenant, rounds: int) -> dict:
    from agents.conversations import cache
    from agents.conversations.packing.build import load_thread
    from core import tokens
    from core.tokens import tokenizer_for

    session = make_session(tenant, 200, summary_turns_kept=None)
    tokenizer = tokenizer_for("gpt-4")

    def load():
        thread, _ = load_thread(tenant_id=tenant.pk, session_id=session.pk, tokenizer=tokenizer)
        assert thread is not None and len(thread.messages) == 400

    def drop():
        cache.invalidate(tenant_id=tenant.pk, session_id=session.pk)
        tokens._count_cached.cache_clear()  # a cold miss: every message tokenized again

    load()
    hit = timed(load, rounds)
    miss = timed(load, max(rounds // 4, 20), before=drop)
    return {
        "hit_p50_ms": median(hit),
        "hit_p95_ms": p95(hit),
        "miss_p50_ms": median(miss),
        "miss_p95_ms": p95(miss),
    }


def cleanup(tenant) -> None:
    from django.db import connection

    from tenants.scope import tenant_scope

    with tenant_scope(tenant.pk), connection.cursor() as cursor:
        for table in ("agents_message", "agents_agentsession"):
            cursor.execute(f"DELETE FROM {table} WHERE tenant_id = %s", [str(tenant.pk)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    setup_django()
    tenant = bench_tenant("context")
    try:
        pack = bench_pack(args.rounds)
        build = bench_build(tenant, args.rounds)
        loads = bench_cache(tenant, args.rounds)
    finally:
        cleanup(tenant)
    ok_pack = pack["p50_ms"] <= PACK_TARGET_P50_MS
    ok_build = max(build["hit_p95_ms"], build["miss_p95_ms"]) <= BUILD_TARGET_P95_MS
    print(f"{'measure':<66} {'p50 ms':>8} {'p95 ms':>8}  target")
    rows = [
        (f"pack {pack['candidates']} candidates ({pack['candidate_tokens']} tokens) "
         "into 128k", pack["p50_ms"], pack["p95_ms"], f"p50 <= {PACK_TARGET_P50_MS}",
         ok_pack),
        ("build 200-turn context, summary + 20 memories, cache hit", build["hit_p50_ms"],
         build["hit_p95_ms"], f"p95 <= {BUILD_TARGET_P95_MS}",
         build["hit_p95_ms"] <= BUILD_TARGET_P95_MS),
        ("build 200-turn context, summary + 20 memories, cache miss", build["miss_p50_ms"],
         build["miss_p95_ms"], f"p95 <= {BUILD_TARGET_P95_MS}",
         build["miss_p95_ms"] <= BUILD_TARGET_P95_MS),
        ("load 400-message thread, cache hit", loads["hit_p50_ms"], loads["hit_p95_ms"], "", None),
        ("load 400-message thread, cache miss (PostgreSQL, cold tokenizer)", loads["miss_p50_ms"],
         loads["miss_p95_ms"], "", None),
    ]  # fmt: skip
    for name, a, b, target, ok in rows:
        verdict = "" if ok is None else ("met" if ok else "MISSED")
        print(f"{name:<66} {a:>8.2f} {b:>8.2f}  {target} {verdict}")
    print(
        f"packed {pack['included']} of {pack['candidates']} items, "
        f"{pack['tokens_used']} of {pack['budget']} tokens"
    )
    dump_json(
        {
            "bench": "context_packer",
            "pack": pack,
            "build_200_turns": build,
            "cache_400_messages": loads,
            "targets_met": ok_pack and ok_build,
        }
    )
    return 0 if ok_pack and ok_build else 1


if __name__ == "__main__":
    sys.exit(main())
