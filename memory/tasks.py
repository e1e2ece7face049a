"""Celery tasks of the memory app: take ids, call a service or a sweep, nothing else."""

from __future__ import annotations

from celery import shared_task

from memory.facts import retention
from memory.search import indexing
from tenants.tasks import TenantTask


class IndexingTask(TenantTask):
    abstract = True
    one_transaction = False  # no transaction may stay open while the model runs


@shared_task(base=IndexingTask, name="memory.embed_facts", acks_late=True)
def embed_facts(*, tenant_id: str, fact_ids: list[str]) -> dict:
    done = indexing.embed_facts(tenant_id=tenant_id, fact_ids=fact_ids)
    if done.more:
        # Facts left behind (out of batches, or a writer held them 10 s): another pass, after
        # whatever else waits in the queue.
        embed_facts.delay(tenant_id=tenant_id, fact_ids=[])
    return {"embedded": done.embedded, "batches": done.batches}


@shared_task(name="memory.embedding_backfill", acks_late=True)
def embedding_backfill() -> int:
    return indexing.backfill()


@shared_task(name="memory.retention_sweep", acks_late=True)
def retention_sweep() -> dict:
    return retention.sweep_all()
