"""Embedding facts off the request path: new facts, the backfill, and re-embedding after a
model change; plus the near-duplicate merge that needs the embedding to decide."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from memory.embeddings import get_provider, to_sql
from memory.models import MemoryFact
from tenants import sql
from tenants.scope import system_scope, tenant_scope

logger = logging.getLogger(__name__)

# Another live fact of the same subject and category this close in meaning is the same fact.
_TWIN_SQL = sql.load("memory", "find_twin_fact")


def _stale() -> Q:
    provider = get_provider()
    model = provider.name if provider else ""
    return Q(valid_until__isnull=True) & (Q(embedding__isnull=True) | ~Q(embedding_model=model))


def embed_facts(*, tenant_id: Any, fact_ids: list[Any]) -> int:
    """Embed these facts of one tenant (those still unembedded or from another model)."""
    if get_provider() is None:
        return 0
    with tenant_scope(tenant_id):
        facts = list(
            MemoryFact.objects.for_tenant(tenant_id)
            .filter(_stale(), pk__in=fact_ids)
            .select_for_update(skip_locked=True)
            .only(
                "id", "tenant_id", "subject_id", "lineage", "category", "key", "text", "created_at"
            )
        )
        return _embed(facts)


def backfill(*, batch: int | None = None, max_batches: int = 100) -> int:
    """Embed every live fact that lacks an embedding of the current model, in batches."""
    if get_provider() is None:
        return 0
    batch = batch or settings.MEMORY_EMBED_BATCH
    total = 0
    for _ in range(max_batches):
        with system_scope("memory_embedding_backfill") as ctx:
            facts = list(
                MemoryFact.objects.filter(_stale())
                .order_by("created_at")
                .select_for_update(skip_locked=True)
                .only(
                    "id",
                    "tenant_id",
                    "subject_id",
                    "lineage",
                    "category",
                    "key",
                    "text",
                    "created_at",
                )[:batch]
            )
            done = _embed(facts)
            if done:
                ctx.record(embedded=done)
        total += done
        if len(facts) < batch:
            break
    return total


def _embed(facts: list[MemoryFact]) -> int:
    if not facts:
        return 0
    provider = get_provider()
    assert provider is not None
    vectors = provider.embed([f.text for f in facts])
    now = timezone.now()
    for fact, vector in zip(facts, vectors, strict=True):
        MemoryFact.objects.for_tenant(fact.tenant_id).filter(pk=fact.pk).update(
            embedding=vector, embedding_model=provider.name, updated_at=now
        )
        _merge_twin(fact, vector, provider.name)
    return len(facts)


def _merge_twin(fact: MemoryFact, vector: list[float], model: str) -> None:
    """A new fact that says what an older one says refreshes the older one instead."""
    if MemoryFact.objects.filter(lineage=fact.lineage).exclude(pk=fact.pk).exists():
        return  # an edited fact keeps its own history
    with connection.cursor() as cursor:
        cursor.execute(
            _TWIN_SQL,
            [
                str(fact.tenant_id),
                fact.subject_id,
                fact.category,
                str(fact.pk),
                str(fact.lineage),
                model,
                fact.key,
                fact.created_at,
                to_sql(vector),
                settings.MEMORY_DEDUPE_SIMILARITY,
            ],
        )
        twin = cursor.fetchone()
    if twin is None:
        return
    with transaction.atomic():
        facts = MemoryFact.objects.for_tenant(fact.tenant_id)
        facts.filter(pk=twin[0]).update(updated_at=timezone.now())
        facts.filter(pk=fact.pk).delete()
    logger.info("memory fact %s merged into its near-duplicate %s", fact.pk, twin[0])
