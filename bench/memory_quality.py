"""Memory retrieval quality on real long conversations: the LoCoMo dev split.

    .venv/bin/python bench/memory_quality.py [--data ../shared/data/locomo-dev]
                                             [--via api|inproc] [--limit 10]

Every turn of each conversation is stored as one memory fact about one person (one person per
conversation): its text carries the session's date, the speaker and the turn (plus the caption
of a shared image), and the fact says when it was said (`occurred_at`, the session's time).
Every answerable question (categories 1–4; 5, adversarial, has no evidence) is then asked
through the product's memory search for that person, limit 10. recall@k is the share of a
question's evidence turns among the first k results, averaged over questions, overall and per
category. In the same run, over the same turn texts, two baselines:

  BM25   Okapi BM25 (rank_bm25, k1 1.5, b 0.75) over lowercased word tokens
  dense  cosine similarity of the same embedding model's vectors (all-MiniLM-L6-v2)

--via api (default): facts written with POST /api/v1/memory/subjects/{id}/facts:batch and
questions asked with GET /api/v1/memory/subjects/{id}/search on a real uvicorn server;
--via inproc: the same services and selectors called in this process (faster, for tuning).

Target: the product's recall@5 at least 0.05 above the better baseline's, overall.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

import numpy as np  # noqa: E402

from bench import _common as common  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
TARGET_MARGIN = 0.05
CATEGORY = "conversation"  # a category of the bench tenant's own, without the default cap
_TOKEN = re.compile(r"[a-z0-9]+")


@dataclass
class Turn:
    dia_id: str
    text: str  # as stored: "[8 May 2023] Caroline: ..."
    said_at: dt.datetime


@dataclass
class Question:
    text: str
    evidence: set[str]
    category: int


@dataclass
class Conversation:
    name: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def parse_when(value: str) -> dt.datetime:
    """ "1:56 pm on 8 May, 2023" (the dataset's session times)."""
    return dt.datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.UTC)


def load(data_dir: Path) -> list[Conversation]:
    found = []
    for path in sorted(data_dir.glob("*.json")):
        raw = json.loads(path.read_text())
        conv = raw.get("conversation", raw)
        item = Conversation(name=path.stem)
        n = 1
        while f"session_{n}_date_time" in conv:
            turns = conv.get(f"session_{n}") or []
            when = parse_when(conv[f"session_{n}_date_time"])
            for i, turn in enumerate(turns):
                text = f"[{when:%-d %B %Y}] {turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares an image: {turn['blip_caption']}]"
                # Turns of a session a minute apart: the order survives as time.
                item.turns.append(Turn(turn["dia_id"], text, when + dt.timedelta(minutes=i)))
            n += 1
        for qa in raw["qa"]:
            if qa.get("category") in CATEGORIES and qa.get("evidence"):
                item.questions.append(
                    Question(qa["question"], set(qa["evidence"]), int(qa["category"]))
                )
        found.append(item)
    return found


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class Recall:
    def __init__(self) -> None:
        self.by_cat: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def add(self, question: Question, ranked: list[str]) -> None:
        at5 = len(question.evidence & set(ranked[:5])) / len(question.evidence)
        at10 = len(question.evidence & set(ranked[:10])) / len(question.evidence)
        self.by_cat["all"].append((at5, at10))
        self.by_cat[CATEGORIES[question.category]].append((at5, at10))

    def row(self, cat: str) -> tuple[float, float, int]:
        values = self.by_cat.get(cat, [])
        if not values:
            return float("nan"), float("nan"), 0
        return (
            sum(v[0] for v in values) / len(values),
            sum(v[1] for v in values) / len(values),
            len(values),
        )


# --------------------------------------------------------------------------- the product


class InProcess:
    def __init__(self, tenant) -> None:
        from memory.facts import services
        from tenants.scope import tenant_scope

        self.tenant = tenant
        self.principal = common.principal_for(tenant)
        with tenant_scope(tenant.pk):
            services.policy_set(
                actor=self.principal,
                category=CATEGORY,
                label="Conversation",
                max_facts_per_subject=10000,
            )

    def subject(self, name: str):
        """A member of the bench tenant (the API finds only members' memories)."""
        from django.contrib.auth import get_user_model

        from tenants.services import membership_add

        person = get_user_model().objects.create(username=f"{name}-{self.tenant.slug}"[:150])
        membership_add(tenant=self.tenant, user=person, role="member", actor_label="bench")
        return person

    def store(self, subject, turns: list[Turn]) -> dict[str, str]:
        from memory.facts import remember
        from tenants.scope import tenant_scope

        ids = {}
        with tenant_scope(self.tenant.pk):
            for turn in turns:
                fact = remember.fact_remember(
                    tenant_id=self.tenant.pk,
                    subject_id=subject.pk,
                    category=CATEGORY,
                    text=turn.text,
                    occurred_at=turn.said_at,
                )
                ids[str(fact.pk)] = turn.dia_id
        return ids

    def search(self, subject, query: str, limit: int) -> list[str]:
        from memory import selectors
        from tenants.scope import tenant_scope

        with tenant_scope(self.tenant.pk):
            found = selectors.search_facts(
                tenant_id=self.tenant.pk, subject_id=subject.pk, query=query, limit=limit
            )
        return [str(r["id"]) for r in found["results"]]


class OverHttp(InProcess):
    def __init__(self, tenant, url: str) -> None:
        import httpx

        super().__init__(tenant)
        key = common.api_key_for(tenant)
        self.http = httpx.Client(
            base_url=url + "/api/v1", headers={"Authorization": f"Bearer {key}"}, timeout=60
        )

    def store(self, subject, turns: list[Turn]) -> dict[str, str]:
        ids = {}
        for start in range(0, len(turns), 500):
            chunk = turns[start : start + 500]
            body = {
                "facts": [
                    {"category": CATEGORY, "text": t.text, "occurred_at": t.said_at.isoformat()}
                    for t in chunk
                ]
            }
            response = self.http.post(f"/memory/subjects/{subject.pk}/facts:batch", json=body)
            response.raise_for_status()
            for turn, item in zip(chunk, response.json()["results"], strict=True):
                ids[str(item["fact"]["id"])] = turn.dia_id
        return ids

    def search(self, subject, query: str, limit: int) -> list[str]:
        response = self.http.get(
            f"/memory/subjects/{subject.pk}/search", params={"q": query, "limit": limit}
        )
        response.raise_for_status()
        return [str(r["id"]) for r in response.json()["results"]]


def wait_embedded(tenant, timeout: float = 600) -> float:
    """Embed what is left (the backfill, as beat would) and wait until every fact has one."""
    from memory.models import MemoryFact
    from memory.search import indexing
    from tenants.scope import tenant_scope

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        indexing.backfill(grace=dt.timedelta(0))
        with tenant_scope(tenant.pk):
            missing = (
                MemoryFact.objects.for_tenant(tenant.pk)
                .filter(valid_until__isnull=True, embedding__isnull=True)
                .count()
            )
        if not missing:
            return time.monotonic() - t0
        time.sleep(0.5)
    raise SystemExit("facts were not embedded in time")


def cleanup(tenant) -> str:
    """Delete the bench tenant's facts and the people they were about."""
    from django.contrib.auth import get_user_model

    from memory.models import MemoryFact
    from tenants.models import Membership
    from tenants.scope import tenant_scope

    with tenant_scope(tenant.pk):
        facts, _ = MemoryFact.objects.for_tenant(tenant.pk).delete()
        Membership.objects.for_tenant(tenant.pk).delete()
    people, _ = get_user_model().objects.filter(username__endswith=f"-{tenant.slug}").delete()
    return f"deleted {facts} facts and {people} rows of the bench's people"


# --------------------------------------------------------------------------- baselines


def bm25_rankings(conv: Conversation, limit: int) -> list[list[str]]:
    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi([tokens(t.text) for t in conv.turns])
    out = []
    for q in conv.questions:
        scores = bm25.get_scores(tokens(q.text))
        order = np.argsort(-scores, kind="stable")[:limit]
        out.append([conv.turns[i].dia_id for i in order])
    return out


def dense_rankings(conv: Conversation, limit: int) -> list[list[str]]:
    from memory.search.embeddings import get_provider

    provider = get_provider()
    assert provider is not None, "the dense baseline needs the local embedding model"
    docs = np.asarray(provider.embed([t.text for t in conv.turns]), dtype=np.float32)
    queries = np.asarray(provider.embed([q.text for q in conv.questions]), dtype=np.float32)
    sims = queries @ docs.T  # normalized vectors: cosine
    return [[conv.turns[i].dia_id for i in np.argsort(-row)[:limit]] for row in sims]


# --------------------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(BASE_DIR.parent / "shared" / "data" / "locomo-dev"))
    parser.add_argument("--via", choices=("api", "inproc"), default="api")
    parser.add_argument("--limit", type=int, default=10)
    args = parser.parse_args()
    conversations = load(Path(args.data))
    if not conversations:
        raise SystemExit(f"no conversations under {args.data}")
    common.setup_django()
    tenant = common.bench_tenant("quality")
    recalls = {"product": Recall(), "BM25": Recall(), "dense": Recall()}
    timings: dict[str, float] = {}
    try:
        server = common.asgi_server("quality") if args.via == "api" else None
        url = server.__enter__() if server else ""
        try:
            product = OverHttp(tenant, url) if server else InProcess(tenant)
            subjects = {}
            t0 = time.monotonic()
            for conv in conversations:
                subjects[conv.name] = product.subject(conv.name)
                conv_ids = product.store(subjects[conv.name], conv.turns)
                subjects[conv.name].fact_ids = conv_ids
            timings["store s"] = time.monotonic() - t0
            timings["embed wait s"] = wait_embedded(tenant)
            t0 = time.monotonic()
            asked = 0
            for conv in conversations:
                subject = subjects[conv.name]
                for q in conv.questions:
                    ranked = product.search(subject, q.text, args.limit)
                    recalls["product"].add(q, [subject.fact_ids.get(i, "") for i in ranked])
                    asked += 1
            timings["search ms/q"] = (time.monotonic() - t0) * 1000 / max(asked, 1)
        finally:
            if server:
                server.__exit__(None, None, None)
        for conv in conversations:
            for q, ranked in zip(conv.questions, bm25_rankings(conv, args.limit), strict=True):
                recalls["BM25"].add(q, ranked)
            for q, ranked in zip(conv.questions, dense_rankings(conv, args.limit), strict=True):
                recalls["dense"].add(q, ranked)
    finally:
        print(cleanup(tenant))
    turns = sum(len(c.turns) for c in conversations)
    questions = sum(len(c.questions) for c in conversations)
    print(
        f"\nLoCoMo dev: {len(conversations)} conversations, {turns} turns stored as facts, "
        f"{questions} answerable questions, via {args.via}; "
        + ", ".join(f"{k} {v:.1f}" for k, v in timings.items())
    )
    header = f"{'recall@5 / @10':<16}" + "".join(f"{name:>16}" for name in recalls)
    print(header)
    result = {}
    for cat in ["all", *CATEGORIES.values()]:
        cells = []
        for name, recall in recalls.items():
            at5, at10, n = recall.row(cat)
            result.setdefault(name, {})[cat] = {"r5": at5, "r10": at10, "n": n}
            cells.append(f"{at5:.2f} / {at10:.2f}")
        n = recalls["product"].row(cat)[2]
        print(f"{cat + f' ({n})':<16}" + "".join(f"{c:>16}" for c in cells))
    best = max(result["BM25"]["all"]["r5"], result["dense"]["all"]["r5"])
    margin = result["product"]["all"]["r5"] - best
    verdict = "meets" if margin >= TARGET_MARGIN else "MISSES"
    print(
        f"target: product recall@5 ≥ best baseline + {TARGET_MARGIN:.2f}: "
        f"{result['product']['all']['r5']:.3f} vs {best:.3f} ({margin:+.3f}): {verdict}"
    )
    common.dump_json({"bench": "memory_quality", "via": args.via, "recall": result, **timings})
    return 0 if margin >= TARGET_MARGIN else 1


if __name__ == "__main__":
    raise SystemExit(main())
