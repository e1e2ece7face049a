"""Hybrid retrieval for one subject: filter first on the (tenant, subject) B-tree, rank exactly.

No ANN index on this path: a subject has tens to hundreds of live facts, so an exact cosine
over those rows beats any filtered HNSW scan in both time and recall (see docs/memory.md).
Scores fuse BM25 and vector similarity (each normalized over the candidates), then weight by
category, recency, confidence and, for questions about time, when the fact happened.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection

from core import sql
from memory.facts.timewords import time_intent

# One statement: the candidate rows come from the B-tree, every score is computed on them.
# A template: build_sql() fills in the parts below for each combination.
_SQL = sql.load("memory", "search_facts")
_BM25 = sql.load("memory", "search_bm25")
_VSCORE = (
    "CASE WHEN f.embedding_model = %(model)s THEN 1 - (f.embedding <=> %(vector)s::vector) END"
)
_WORD = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True)
class RetrievedFact:
    id: Any
    category: str
    key: str
    text: str
    valid_from: dt.datetime
    source_kind: str
    source_session_id: Any
    pinned: bool
    vector_score: float | None  # cosine similarity
    text_score: float  # BM25
    score: float
    occurred_at: dt.datetime | None = None
    parts: dict[str, float | None] = field(default_factory=dict)  # what the score is made of


def tsquery(query: str) -> str:
    """Any of the query's words (OR): a fact need not repeat the whole question."""
    return " | ".join(dict.fromkeys(w.lower() for w in _WORD.findall(query or "")[:64]))


def build_sql(*, subject: bool, vector: bool, text: bool) -> str:
    """The statement for one combination of filters and signals (cached by the caller)."""
    keep = ["pinned"]
    if vector:
        keep.append("vscore >= %(min_similarity)s")
    if text:
        keep.append("tscore > 0")
    return _SQL.format(
        vscore=_VSCORE if vector else "NULL::float8",
        text=_BM25 if text else "SELECT NULL::uuid AS id, 0::float8 AS tscore WHERE false",
        subject="AND f.subject_id = %(subject)s" if subject else "",
        keep=" OR ".join(keep) if (vector or text) else "true",
    )


_STATEMENTS = {
    (s, v, t): build_sql(subject=s, vector=v, text=t)
    for s in (True, False)
    for v in (True, False)
    for t in (True, False)
}


_WEIGHTS: dict[str, str] = {}
_BINARY_VECTORS: weakref.WeakSet = weakref.WeakSet()


def _vector_param(vector: Sequence[float]) -> Any:
    """The query vector as a binary parameter (pgvector's dumper, registered once per
    connection): formatting 384 floats as text costs more than the ranking itself."""
    raw = connection.connection
    if raw is None:
        connection.ensure_connection()
        raw = connection.connection
    # numpy (which pgvector's dumper needs) takes 0.4 s to import: a process pays it at its
    # first search by meaning, not as it starts (most workers and beats never search).
    import numpy as np

    if raw not in _BINARY_VECTORS:
        from pgvector.psycopg import register_vector

        register_vector(raw)  # one catalog lookup per connection
        _BINARY_VECTORS.add(raw)
    return np.asarray(vector, dtype=np.float32)


def params(
    *,
    tenant_id: Any,
    subject_id: Any,
    query: str,
    vector: Sequence[float] | None,
    model: str,
    limit: int,
) -> dict[str, Any]:
    when = time_intent(query)
    return {
        "tenant": str(tenant_id),
        "subject": subject_id,
        "query": (query or "")[:2000],
        "tsquery": tsquery(query),
        "vector": _vector_param(vector) if vector is not None else None,
        "model": model,
        "k1": settings.MEMORY_BM25_K1,
        "b": settings.MEMORY_BM25_B,
        "wv": settings.MEMORY_VECTOR_WEIGHT,
        "wr": settings.MEMORY_RECENCY_WEIGHT,
        "wt": settings.MEMORY_TIME_WEIGHT,
        "halflife": settings.MEMORY_RECENCY_HALF_LIFE_DAYS * 86400.0,
        "weights": _weights(),
        "min_similarity": settings.MEMORY_MIN_SIMILARITY,
        "when": when.mode,
        "since": when.since,
        "until": when.until,
        "limit": limit,
    }


def _weights() -> str:
    # Settings are fixed per process (tests change them through the settings fixture).
    weights = settings.MEMORY_CATEGORY_WEIGHTS
    key = repr(sorted(weights.items()))
    if key not in _WEIGHTS:
        _WEIGHTS[key] = json.dumps(weights)
    return _WEIGHTS[key]


def search(
    *,
    tenant_id: Any,
    subject_id: Any | None,
    query: str,
    vector: Sequence[float] | None = None,
    model: str = "",
    limit: int = 20,
) -> list[RetrievedFact]:
    """Live, unexpired facts of one subject (or, with subject_id=None, the whole tenant),
    best first. With `vector`, hybrid; without, full-text only. Needs the tenant context."""
    p = params(
        tenant_id=tenant_id,
        subject_id=subject_id,
        query=query,
        vector=vector,
        model=model,
        limit=limit,
    )
    use_vector = vector is not None and bool(model)
    use_text = bool(p["tsquery"])
    sql = _STATEMENTS[(subject_id is not None, use_vector, use_text)]
    with connection.cursor() as cursor:
        cursor.execute(sql, p)
        rows = cursor.fetchall()
    return [
        RetrievedFact(
            id=r[0],
            category=r[1],
            key=r[2],
            text=r[3],
            valid_from=r[4],
            source_kind=r[5],
            source_session_id=r[6],
            pinned=r[7],
            vector_score=r[8],
            text_score=r[9],
            score=r[10],
            occurred_at=r[11],
            parts=dict(zip(PARTS, r[12:], strict=True)),
        )
        for r in rows
    ]


PARTS = ("text", "vector", "category", "recency", "confidence", "time")
