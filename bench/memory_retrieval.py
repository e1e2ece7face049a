"""Long-term memory at scale: per-user retrieval and tenant-wide search against the raw SQL
floor, insert cost, ranking quality, embedding throughput, and a TTL purge under load.

    .venv/bin/python bench/memory_retrieval.py [--facts 100000] [--tenants 1000] [--users 10]
                                               [--queries 400] [--expired 100000] [--keep]

1. **Load.** `--tenants` bench tenants x `--users` users, `--facts` live facts spread evenly
   over the users (100,000 = 10 per user; 1,000,000 = 100 per user), each with a random unit
   384-dim vector stamped with the local model's name and a synthetic sentence (so full-text
   search has words to match). Binary COPY through a superuser connection; tenants and users
   are raw rows too, so the whole bench data set is deleted at the end (unless --keep).
2. **Per-user retrieval** (the path every step takes): `memory.retrieval.search` for a random
   user with a random query vector and query words, inside that tenant's context (RLS on),
   against the very same statement and parameters executed on the raw psycopg cursor of the
   same connection. Alternating order per sample; embedding time excluded from both.
   Target: our p50 <= 1.3x the raw p50.
3. **Tenant-wide search** (subject_id=None: all facts of one tenant), the same comparison.
4. **Insert cost**: `memory.services.fact_remember` (validation, secret check, dedupe lookup,
   insert) per fact, against a raw single-row INSERT of the same row.
5. **Ranking quality** on a small labelled set written for this bench (a customer's 30 facts,
   20 questions, each with the fact that answers it): recall@5 for hybrid, vector-only and
   text-only, with the real all-MiniLM-L6-v2 embeddings. And the model's throughput.
6. **TTL purge under load**: `--expired` more facts already past their expiry (on their own
   users), purged by `memory.retention.purge_expired_facts` in a thread while this thread
   keeps retrieving; reports the sweep time, the worst retrieval latency during it, and the
   VACUUM (ANALYZE) of the table afterwards.

Ends with one JSON line; exits 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

import numpy as np  # noqa: E402

from bench._common import (  # noqa: E402
    assert_durable,
    dump_json,
    median,
    p95,
    setup_django,
    super_connect,
)

RATIO_TARGET = 1.3
DIMS = 384
WORDS = [
    "email",
    "phone",
    "sms",
    "desk",
    "lamp",
    "order",
    "refund",
    "invoice",
    "shipping",
    "address",
    "city",
    "paris",
    "lyon",
    "berlin",
    "vegetarian",
    "allergy",
    "peanuts",
    "morning",
    "evening",
    "weekend",
    "manager",
    "account",
    "premium",
    "discount",
    "delivery",
    "courier",
    "warranty",
    "repair",
    "chair",
    "monitor",
    "keyboard",
    "language",
    "french",
    "german",
    "english",
    "birthday",
    "anniversary",
    "subscription",
    "monthly",
    "annual",
    "payment",
    "card",
    "bank",
    "transfer",
    "voucher",
]
TEMPLATES = [
    "Prefers {a} for {b}",
    "Asked about the {a} and the {b}",
    "Mentioned a {a} {b} last time",
    "Likes {a}, dislikes {b}",
    "Had a problem with {a} during {b}",
]
CATEGORIES = ["preference", "profile", "task_outcome", "note"]


def sentence(rng: random.Random) -> str:
    return rng.choice(TEMPLATES).format(a=rng.choice(WORDS), b=rng.choice(WORDS))


# A customer's facts and questions an agent might ask of them; each question's answer is the
# fact at that index. Written for this bench: some questions share words with their fact,
# some only meaning, some neither well.
FACTS = [
    "Prefers to be contacted by email",  # 0
    "Lives in Lyon, France",  # 1
    "Is allergic to peanuts",  # 2
    "Works night shifts as a nurse",  # 3
    "Has a premium subscription, renewed every January",  # 4
    "Ordered a standing desk (A-1001) that was charged twice",  # 5
    "Speaks French and German, prefers French",  # 6
    "Has two children aged 4 and 7",  # 7
    "Uses a wheelchair; needs ground-floor deliveries",  # 8
    "Dislikes phone calls before 10am",  # 9
    "Birthday is on 14 March",  # 10
    "Drives an electric car",  # 11
    "Vegetarian, eats fish occasionally",  # 12
    "Returned a lamp last year because it flickered",  # 13
    "Pays by bank transfer, not by card",  # 14
    "Owns a cat named Pixel",  # 15
    "Plays tennis on weekends",  # 16
    "Is planning a move to Berlin in the summer",  # 17
    "Prefers parcels left with the neighbour at number 12",  # 18
    "Asked for invoices to be addressed to her company, Lumen SARL",  # 19
    "Reads mostly science fiction",  # 20
    "Has a warranty extension on the office chair",  # 21
    "Complained about slow courier delivery in May",  # 22
    "Uses the mobile app rather than the website",  # 23
    "Is hard of hearing; prefers written communication",  # 24
    "Works from home on Mondays and Fridays",  # 25
    "Supports the local football club",  # 26
    "Got a 10% loyalty discount code in April",  # 27
    "Is learning to play the piano",  # 28
    "Prefers eco-friendly packaging",  # 29
]
QUESTIONS = [
    ("How should we get in touch with the customer?", 0),
    ("Which city does the customer live in?", 1),
    ("Does the customer have any food allergies?", 2),
    ("What is the customer's job?", 3),
    ("When does the customer's subscription renew?", 4),
    ("Was the customer double charged for something?", 5),
    ("Which language should we reply in?", 6),
    ("Does the customer have kids?", 7),
    ("Are there accessibility needs for deliveries?", 8),
    ("What time is too early to call?", 9),
    ("When is the customer's birthday?", 10),
    ("What kind of car does the customer drive?", 11),
    ("What does the customer eat?", 12),
    ("Has the customer returned anything before?", 13),
    ("How does the customer like to pay?", 14),
    ("Does the customer have pets?", 15),
    ("What sport does the customer play?", 16),
    ("Is the customer moving house soon?", 17),
    ("Where should the courier leave a parcel if nobody is home?", 18),
    ("Whose name goes on the invoice?", 19),
]


# --- loading --------------------------------------------------------------------------------------


def load(args, model: str) -> dict:
    """Tenants, users and facts as raw rows; returns the ids the measurements use."""
    from pgvector.psycopg import register_vector

    from config.settings import DATABASES

    dbname = DATABASES["default"]["NAME"]
    rng = random.Random(7)
    np_rng = np.random.default_rng(7)
    tag = uuid.uuid4().hex[:8]
    t0 = time.perf_counter()
    with super_connect(dbname) as conn:
        register_vector(conn)
        tenants = [uuid.uuid4() for _ in range(args.tenants)]
        with conn.cursor() as cur:
            with cur.copy(
                "COPY tenants_tenant (id, slug, name, session_cache_ttl_seconds,"
                " checkpoint_retention_days, conversation_retention_days, audit_retention_days,"
                " created_at) FROM STDIN"
            ) as copy:
                for n, tid in enumerate(tenants):
                    copy.write_row(
                        (tid, f"bench-mem-{tag}-{n}", f"bench memory {n}", 3600, 7, 90, 365, "now")
                    )
            users_needed = args.tenants * args.users * 2  # live users, then expired-fact users
            cur.execute(
                "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name,"
                " email, is_staff, is_active, date_joined)"
                " SELECT '!', false, %s || g, '', '', '', false, true, now()"
                " FROM generate_series(1, %s) g RETURNING id",
                [f"bench-mem-{tag}-", users_needed],
            )
            user_ids = [r[0] for r in cur.fetchall()]
        live_users = [
            (tenants[i // args.users], user_ids[i]) for i in range(args.tenants * args.users)
        ]
        expired_users = [
            (tenants[i // args.users], user_ids[len(live_users) + i])
            for i in range(args.tenants * args.users)
        ]
        written = _copy_facts(conn, live_users, args.facts, model, rng, np_rng, expired=False)
        _copy_facts(conn, expired_users, args.expired, model, rng, np_rng, expired=True)
        conn.execute("ANALYZE memory_memoryfact")
    return {
        "tag": tag,
        "tenants": tenants,
        "live_users": live_users,
        "user_ids": user_ids,
        "facts": written,
        "load_s": time.perf_counter() - t0,
    }


def _copy_facts(conn, users, count, model, rng, np_rng, *, expired: bool) -> int:
    if not count:
        return 0
    expiry = "2000-01-01T00:00:00Z" if expired else None
    batch = 20000
    done = 0
    with conn.cursor() as cur:
        with cur.copy(
            "COPY memory_memoryfact (id, tenant_id, subject_id, lineage, category, key, text,"
            " normalized, embedding, embedding_model, source_kind, confidence, pinned,"
            " created_at, updated_at, valid_from, expires_at) FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(
                [
                    "uuid",
                    "uuid",
                    "int4",
                    "uuid",
                    "varchar",
                    "varchar",
                    "text",
                    "text",
                    "vector",
                    "varchar",
                    "varchar",
                    "float8",
                    "bool",
                    "timestamptz",
                    "timestamptz",
                    "timestamptz",
                    "timestamptz",
                ]
            )
            import datetime as dt

            now = dt.datetime.now(dt.UTC)
            while done < count:
                n = min(batch, count - done)
                vectors = np_rng.standard_normal((n, DIMS), dtype=np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                for i in range(n):
                    tenant_id, user_id = users[(done + i) % len(users)]
                    text = sentence(rng)
                    age = dt.timedelta(days=rng.random() * 120)
                    copy.write_row(
                        (
                            uuid.uuid4(),
                            tenant_id,
                            user_id,
                            uuid.uuid4(),
                            rng.choice(CATEGORIES),
                            "",
                            text,
                            text.lower(),
                            vectors[i],
                            model,
                            "conversation",
                            rng.random(),
                            False,
                            now - age,
                            now - age,
                            now - age,
                            dt.datetime.fromisoformat(expiry) if expiry else None,
                        )
                    )
                done += n
    return done


def cleanup(data: dict) -> str:
    from config.settings import DATABASES

    with super_connect(DATABASES["default"]["NAME"]) as conn:
        ids = [str(t) for t in data["tenants"]]
        conn.execute("DELETE FROM memory_memoryfact WHERE tenant_id = ANY(%s::uuid[])", [ids])
        conn.execute("DELETE FROM tenants_tenant WHERE id = ANY(%s::uuid[])", [ids])
        conn.execute("DELETE FROM auth_user WHERE id = ANY(%s)", [data["user_ids"]])
        conn.execute("VACUUM ANALYZE memory_memoryfact")
    return "deleted the bench tenants, users and facts"


# --- measurements ---------------------------------------------------------------------------------


def compare(data: dict, queries: int, *, tenant_wide: bool, model: str) -> dict:
    """Our retrieval function against the same statement on the raw cursor, alternating."""
    from django.db import connection

    from memory import retrieval
    from tenants.scope import tenant_scope

    rng = random.Random(11)
    np_rng = np.random.default_rng(11)
    ours, raw, rows = [], [], []
    for i in range(queries):
        tenant_id, user_id = rng.choice(data["live_users"])
        subject = None if tenant_wide else user_id
        vector = np_rng.standard_normal(DIMS).astype(np.float32)
        vector = (vector / np.linalg.norm(vector)).tolist()
        query = f"{rng.choice(WORDS)} {rng.choice(WORDS)}"
        p = retrieval.params(
            tenant_id=tenant_id,
            subject_id=subject,
            query=query,
            vector=vector,
            model=model,
            limit=10,
        )
        sql = retrieval._STATEMENTS[(subject is not None, True, True)]
        with tenant_scope(tenant_id):
            raw_cursor = connection.connection.cursor()
            for first in (0, 1) if i % 2 else (1, 0):
                t0 = time.perf_counter()
                if first == 0:
                    found = retrieval.search(
                        tenant_id=tenant_id,
                        subject_id=subject,
                        query=query,
                        vector=vector,
                        model=model,
                        limit=10,
                    )
                    ours.append((time.perf_counter() - t0) * 1000)
                    rows.append(len(found))
                else:
                    raw_cursor.execute(sql, p)
                    raw_cursor.fetchall()
                    raw.append((time.perf_counter() - t0) * 1000)
    warm = queries // 10  # the first tenth warms caches
    ours, raw = ours[warm:], raw[warm:]
    return {
        "ours_p50_ms": median(ours),
        "ours_p95_ms": p95(ours),
        "raw_p50_ms": median(raw),
        "raw_p95_ms": p95(raw),
        "ratio_p50": median(ours) / median(raw),
        "rows_per_query": median([float(r) for r in rows]),
    }


def plan(data: dict, model: str) -> str:
    from django.db import connection

    from memory import retrieval
    from tenants.scope import tenant_scope

    tenant_id, user_id = data["live_users"][0]
    p = retrieval.params(
        tenant_id=tenant_id,
        subject_id=user_id,
        query="email desk",
        vector=[0.0] * DIMS,
        model=model,
        limit=10,
    )
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + retrieval._STATEMENTS[(True, True, True)], p)
        lines = [r[0] for r in cursor.fetchall()]
    return next((line.strip() for line in lines if "Index" in line), lines[-1].strip())


def inserts(data: dict, count: int) -> dict:
    from django.db import connection

    from memory import services
    from tenants.scope import tenant_scope

    rng = random.Random(5)
    ours, raw = [], []
    for i in range(count):
        tenant_id, user_id = rng.choice(data["live_users"])
        text = f"Bench insert {i} {sentence(rng)}"
        with tenant_scope(tenant_id):
            t0 = time.perf_counter()
            services.fact_remember(
                tenant_id=tenant_id, subject_id=user_id, category="note", text=text + " ours"
            )
            ours.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO memory_memoryfact (id, tenant_id, subject_id, lineage, category,"
                    " key, text, normalized, embedding_model, source_kind, confidence, pinned,"
                    " created_at, updated_at, valid_from) VALUES (%s, %s, %s, %s, 'note', '',"
                    " %s, %s, '', 'user', 1, false, now(), now(), now())",
                    [uuid.uuid4(), tenant_id, user_id, uuid.uuid4(), text, text.lower()],
                )
            raw.append((time.perf_counter() - t0) * 1000)
    return {
        "ours_p50_ms": median(ours),
        "raw_p50_ms": median(raw),
        "ours_p95_ms": p95(ours),
        "raw_p95_ms": p95(raw),
    }


def purge_under_load(data: dict, model: str) -> dict:
    from django.db import connection

    from memory import retention, retrieval
    from tenants.scope import tenant_scope

    result: dict = {}

    def sweep() -> None:
        t0 = time.perf_counter()
        result["deleted"] = retention.purge_expired_facts()
        result["sweep_s"] = time.perf_counter() - t0
        connection.close()

    thread = threading.Thread(target=sweep)
    rng = random.Random(3)
    latencies = []
    thread.start()
    while thread.is_alive():
        tenant_id, user_id = rng.choice(data["live_users"])
        vector = np.random.default_rng().standard_normal(DIMS).astype(np.float32).tolist()
        with tenant_scope(tenant_id):
            t0 = time.perf_counter()
            retrieval.search(
                tenant_id=tenant_id,
                subject_id=user_id,
                query="email desk",
                vector=vector,
                model=model,
                limit=10,
            )
            latencies.append((time.perf_counter() - t0) * 1000)
    thread.join()
    from config.settings import DATABASES

    with super_connect(DATABASES["default"]["NAME"]) as conn:
        t0 = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) memory_memoryfact")
        result["vacuum_s"] = time.perf_counter() - t0
    result["retrievals_during"] = len(latencies)
    result["worst_ms_during"] = max(latencies) if latencies else float("nan")
    result["p95_ms_during"] = p95(latencies)
    return result


def quality() -> dict:
    """recall@5 of hybrid, vector-only and text-only ranking on the labelled set below."""
    from django.db import connection

    from memory import retrieval
    from memory.embeddings import get_provider

    provider = get_provider()
    assert provider is not None, "the quality check needs the local embedding model"
    t0 = time.perf_counter()
    fact_vectors = provider.embed(FACTS)
    throughput_texts = [f"{sentence(random.Random(n))} number {n}" for n in range(512)]
    t1 = time.perf_counter()
    provider.embed(throughput_texts)
    per_second = len(throughput_texts) / (time.perf_counter() - t1)
    load_s = t1 - t0
    tenant_id, subject_id = uuid.uuid4(), None
    from pgvector.psycopg import register_vector

    from config.settings import DATABASES

    with super_connect(DATABASES["default"]["NAME"]) as conn:
        register_vector(conn)
        conn.execute(
            "INSERT INTO tenants_tenant (id, slug, name, session_cache_ttl_seconds, created_at)"
            " VALUES (%s, %s, 'bench quality', 3600, now())",
            [tenant_id, f"bench-quality-{tenant_id.hex[:8]}"],
        )
        subject_id = conn.execute(
            "INSERT INTO auth_user (password, is_superuser, username, first_name, last_name,"
            " email, is_staff, is_active, date_joined) VALUES ('!', false, %s, '', '', '',"
            " false, true, now()) RETURNING id",
            [f"bench-quality-{tenant_id.hex[:8]}"],
        ).fetchone()[0]
        ids = []
        for text, vector in zip(FACTS, fact_vectors, strict=True):
            fid = uuid.uuid4()
            ids.append(fid)
            conn.execute(
                "INSERT INTO memory_memoryfact (id, tenant_id, subject_id, lineage, category,"
                " key, text, normalized, embedding, embedding_model, source_kind, confidence,"
                " pinned, created_at, updated_at, valid_from) VALUES (%s, %s, %s, %s,"
                " 'preference', '', %s, %s, %s, %s, 'user', 1, false, now(), now(), now())",
                [
                    fid,
                    tenant_id,
                    subject_id,
                    uuid.uuid4(),
                    text,
                    text.lower(),
                    np.array(vector, dtype=np.float32),
                    provider.name,
                ],
            )
    from tenants.scope import tenant_scope

    hits = {"hybrid": 0, "vector": 0, "text": 0}
    try:
        for question, answer in QUESTIONS:
            qv = provider.embed([question])[0]
            with tenant_scope(tenant_id):
                modes = {
                    "hybrid": dict(query=question, vector=qv, model=provider.name),
                    "vector": dict(query="", vector=qv, model=provider.name),
                    "text": dict(query=question, vector=None, model=""),
                }
                for mode, kwargs in modes.items():
                    found = retrieval.search(
                        tenant_id=tenant_id, subject_id=subject_id, limit=5, **kwargs
                    )
                    if ids[answer] in [f.id for f in found]:
                        hits[mode] += 1
    finally:
        with super_connect(DATABASES["default"]["NAME"]) as conn:
            conn.execute("DELETE FROM memory_memoryfact WHERE tenant_id = %s", [tenant_id])
            conn.execute("DELETE FROM tenants_tenant WHERE id = %s", [tenant_id])
            conn.execute("DELETE FROM auth_user WHERE id = %s", [subject_id])
        connection.close()
    n = len(QUESTIONS)
    return {
        **{f"recall_at_5_{k}": v / n for k, v in hits.items()},
        "questions": n,
        "model_load_and_first_batch_s": load_s,
        "embeddings_per_s": per_second,
    }


# --- main -----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--inserts", type=int, default=200)
    parser.add_argument("--expired", type=int, default=100_000)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()

    setup_django()
    server = assert_durable()
    from memory.embeddings import LOCAL_MODEL_NAME

    model = f"local:{LOCAL_MODEL_NAME}"
    data = load(args, model)
    print(
        f"loaded {data['facts']:,} live + {args.expired:,} expired facts for "
        f"{args.tenants:,} tenants x {args.users} users in {data['load_s']:.1f} s "
        f"(PostgreSQL {server['server_version']}, fsync {server['fsync']})"
    )
    try:
        per_user = compare(data, args.queries, tenant_wide=False, model=model)
        tenant_wide = compare(data, args.queries, tenant_wide=True, model=model)
        index = plan(data, model)
        insert = inserts(data, args.inserts)
        purge = purge_under_load(data, model)
        ranking = quality()
    finally:
        note = "kept the bench data (--keep)" if args.keep else cleanup(data)

    print()
    print(f"{'measure':<44}{'ours':>12}{'raw floor':>12}{'ratio':>8}")
    for label, r in (("per-user retrieval", per_user), ("tenant-wide search", tenant_wide)):
        print(
            f"{label + ' p50 (ms)':<44}{r['ours_p50_ms']:>12.3f}{r['raw_p50_ms']:>12.3f}"
            f"{r['ratio_p50']:>8.2f}"
        )
        print(
            f"{label + ' p95 (ms)':<44}{r['ours_p95_ms']:>12.3f}{r['raw_p95_ms']:>12.3f}"
            f"{r['ours_p95_ms'] / r['raw_p95_ms']:>8.2f}"
        )
    print(
        f"{'insert one fact p50 (ms)':<44}{insert['ours_p50_ms']:>12.3f}"
        f"{insert['raw_p50_ms']:>12.3f}{insert['ours_p50_ms'] / insert['raw_p50_ms']:>8.2f}"
    )
    print(
        f"{'insert one fact p95 (ms)':<44}{insert['ours_p95_ms']:>12.3f}"
        f"{insert['raw_p95_ms']:>12.3f}{insert['ours_p95_ms'] / insert['raw_p95_ms']:>8.2f}"
    )
    print()
    print(f"plan of the per-user statement: {index}")
    print(
        f"rows ranked per query: per user {per_user['rows_per_query']:.0f}, "
        f"tenant-wide {tenant_wide['rows_per_query']:.0f} (LIMIT 10)"
    )
    print()
    print(f"{'TTL purge under load':<44}{'value':>12}")
    print(f"{'expired facts deleted':<44}{purge['deleted']:>12,}")
    print(f"{'sweep time (s)':<44}{purge['sweep_s']:>12.2f}")
    print(f"{'retrievals during the sweep':<44}{purge['retrievals_during']:>12,}")
    print(f"{'worst retrieval during the sweep (ms)':<44}{purge['worst_ms_during']:>12.2f}")
    print(f"{'p95 retrieval during the sweep (ms)':<44}{purge['p95_ms_during']:>12.2f}")
    print(f"{'VACUUM (ANALYZE) afterwards (s)':<44}{purge['vacuum_s']:>12.2f}")
    print()
    print(f"{'ranking quality (' + str(ranking['questions']) + ' questions)':<44}{'recall@5':>12}")
    for mode in ("hybrid", "vector", "text"):
        print(f"{mode:<44}{ranking['recall_at_5_' + mode]:>12.2f}")
    print(
        f"{'embeddings per second (local, CPU, batch 64)':<44}{ranking['embeddings_per_s']:>12.0f}"
    )
    print(note)

    ok = per_user["ratio_p50"] <= RATIO_TARGET and tenant_wide["ratio_p50"] <= RATIO_TARGET
    dump_json(
        {
            "bench": "memory_retrieval",
            "facts": data["facts"],
            "tenants": args.tenants,
            "users_per_tenant": args.users,
            "per_user": per_user,
            "tenant_wide": tenant_wide,
            "insert": insert,
            "purge": purge,
            "ranking": ranking,
            "target_ratio": RATIO_TARGET,
            "ok": ok,
        }
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
