"""Embedding facts off the request path: a tenant's new facts moments after their commit, and
the backfill (a safety net, and re-embedding everything after a model change).

No lock on a fact is held while the model runs, so no write ever waits on it: the texts are
read without locking, embedded outside any transaction, and the vectors stored by one short
statement that writes a fact only if it is still live with the text that was embedded
(`sql/write_embeddings.sql`). An edit, supersede or delete that happened meanwhile wins, and
the new version is embedded by its own task. A fact a writer holds locked is written again a
moment later, never skipped.

One worker at a time embeds a tenant's new facts, many per model call. A task that finds the
tenant's turn taken (a lease in PostgreSQL, core/leader.py) leaves its facts to the worker
holding it, which looks again after giving the turn back, so a fact committed before that
task ran is always seen. And a write queues no task while one is already queued for its
tenant and no worker has read since (a Redis key the reader deletes before it reads,
`task_needed`): a burst of writes costs a task per model call, not one per fact. Two workers
embedding the same fact (a duplicate task, the backfill) cost one model call more: the second
write finds the vector there and changes nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from core import leader, redis_client, sql
from memory.models import MemoryFact
from memory.search.embeddings import EmbeddingProvider, get_provider, to_sql
from tenants.scope import system_scope, tenant_scope

logger = logging.getLogger(__name__)

_WRITE_SQL = sql.load("memory", "write_embeddings")
_WANTED_SQL = sql.load("memory", "embeddings_still_wanted")
# How long computed vectors wait for writers to let go of their facts; past it they are
# dropped and the facts embedded again on the next pass.
WRITE_PATIENCE_SECONDS = 10.0
# The backfill leaves unembedded facts younger than this to their own task.
BACKFILL_GRACE = dt.timedelta(minutes=1)
# How long a tenant's embedding turn lasts unless renewed (before each batch).
TURN_SECONDS = 120.0
_QUEUED = "memory:embed-queued:{}"
# How long "a task is queued for this tenant" holds with no worker reading: past it (a lost
# message, a long queue) the next write queues another.
QUEUED_TTL_SECONDS = 15


@dataclass(frozen=True)
class Embedded:
    """What one pass did."""

    embedded: int = 0  # vectors written
    batches: int = 0  # model calls
    more: bool = False  # facts left behind (out of batches, or held locked): pass again soon


def embed_facts(
    *, tenant_id: Any, fact_ids: Sequence[Any] = (), max_batches: int = 100
) -> Embedded:
    """Embed the tenant's live facts that have no vector (and these ids if another model made
    theirs), oldest first, MEMORY_EMBED_BATCH per model call, until none is left."""
    provider = get_provider()
    if provider is None:
        return Embedded()
    ids = [str(pk) for pk in fact_ids]
    size = settings.MEMORY_EMBED_BATCH
    embedded = batches = 0
    while True:
        with _tenant_turn(tenant_id) as turn:
            if not turn.held:
                # The holder looks again after giving the turn back: it will find ours.
                return Embedded(embedded, batches)
            while batches < max_batches:
                if batches and not turn.renew():  # ran out during a slow model: pass again
                    return Embedded(embedded, batches, more=True)
                _reading(tenant_id)
                facts = _pending(tenant_id, ids, provider.name, limit=size)
                if not facts:
                    break
                batches += 1
                written, left = _embed(facts, provider, scope=lambda: tenant_scope(tenant_id))
                embedded += written
                if left:
                    return Embedded(embedded, batches, more=True)
                if len(facts) < size:
                    break
        # Facts committed while we held the turn, whose tasks found it taken, are ours.
        _reading(tenant_id)
        if not _pending(tenant_id, ids, provider.name, limit=1):
            return Embedded(embedded, batches)
        if batches >= max_batches:
            return Embedded(embedded, batches, more=True)


def task_needed(tenant_id: Any) -> bool:
    """Whether a write just committed must queue an embedding task for its tenant: not when
    one is queued and no worker has read the tenant's facts since (that read will see it)."""
    try:
        return bool(
            redis_client.client().set(_QUEUED.format(tenant_id), 1, nx=True, ex=QUEUED_TTL_SECONDS)
        )
    except redis.RedisError:
        return True  # queue one: a duplicate task costs little, a missing one a fact's vector


def _reading(tenant_id: Any) -> None:
    """About to read the tenant's waiting facts: a write committed from now on queues a task."""
    try:
        redis_client.client().delete(_QUEUED.format(tenant_id))
    except redis.RedisError:
        # The key expires by itself; until then writes lean on this reader and the backfill.
        logger.warning("could not clear the embedding-queued mark of %s", tenant_id)


def backfill(
    *, batch: int | None = None, max_batches: int = 100, grace: dt.timedelta = BACKFILL_GRACE
) -> int:
    """Embed every live fact that lacks a vector of the current model (unembedded ones once
    older than `grace`: the young are their own task's), in batches."""
    provider = get_provider()
    if provider is None:
        return 0
    batch = batch or settings.MEMORY_EMBED_BATCH
    total = 0
    for _ in range(max_batches):
        with system_scope("memory_embedding_backfill"):
            facts = list(
                MemoryFact.objects.filter(_stale(provider.name, timezone.now() - grace))
                .order_by("created_at")
                .values_list("tenant_id", "id", "text")[:batch]
            )
        written, _ = _embed(
            facts, provider, scope=lambda: system_scope("memory_embedding_backfill")
        )
        total += written
        if len(facts) < batch:
            break
    return total


def _pending(
    tenant_id: Any, ids: list[str], model: str, *, limit: int
) -> list[tuple[Any, Any, str]]:
    """(tenant, id, text) of the tenant's live facts waiting for a vector, oldest first; no
    lock."""
    wanted = Q(embedding__isnull=True)
    if ids:
        wanted |= Q(pk__in=ids) & ~Q(embedding_model=model)
    with tenant_scope(tenant_id):
        return list(
            MemoryFact.objects.for_tenant(tenant_id)
            .filter(wanted, valid_until__isnull=True)
            .order_by("created_at")
            .values_list("tenant_id", "id", "text")[:limit]
        )


def _stale(model: str, young: dt.datetime) -> Q:
    unembedded = Q(embedding__isnull=True, created_at__lt=young)
    other_model = Q(embedding__isnull=False) & ~Q(embedding_model=model)
    return Q(valid_until__isnull=True) & (unembedded | other_model)


def _embed(
    facts: list[tuple[Any, Any, str]], provider: EmbeddingProvider, *, scope: Callable[[], Any]
) -> tuple[int, list[Any]]:
    """Embed (tenant, id, text) facts with no transaction open (one model call), then store
    the vectors; answers how many were written, and the ids still held locked by writers after
    WRITE_PATIENCE_SECONDS."""
    if not facts:
        return 0, []
    started = time.monotonic()
    vectors = provider.embed([text for _, _, text in facts])
    computed = time.monotonic()
    todo = [
        (tenant_id, pk, text, to_sql(v))
        for (tenant_id, pk, text), v in zip(facts, vectors, strict=True)
    ]
    written, tries, pause = 0, 0, 0.005
    while True:
        tries += 1
        with scope() as ctx:
            done, todo = _store(todo, provider.name)
            if done and ctx is not None:
                ctx.record(embedded=done)  # a system context audits what it changed
        written += done
        if not todo or time.monotonic() > computed + WRITE_PATIENCE_SECONDS:
            break
        time.sleep(pause)  # a writer holds them: it commits within milliseconds
        pause = min(pause * 2, 0.2)
    logger.debug(
        "embedded %d of %d facts: model %.0f ms, stored in %.0f ms (%d tries)",
        written,
        len(facts),
        (computed - started) * 1000,
        (time.monotonic() - computed) * 1000,
        tries,
    )
    if todo:
        logger.warning("%d facts stayed locked; they are embedded on the next pass", len(todo))
    return written, [pk for _, pk, _, _ in todo]


_Todo = tuple[Any, Any, str, str]  # tenant, fact id, text, vector


def _store(todo: list[_Todo], model: str) -> tuple[int, list[_Todo]]:
    """Write what can be written now, one statement per tenant (under Citus, on its shard);
    answers the count and what still wants writing (facts a writer holds locked), dropping
    the facts that changed, went or got a vector meanwhile."""
    tenants: dict[Any, list[_Todo]] = {}
    for item in todo:
        tenants.setdefault(item[0], []).append(item)
    count, rest = 0, []
    with connection.cursor() as cursor:
        for tenant_id, items in tenants.items():
            cursor.execute(
                _WRITE_SQL,
                {
                    "tenant": tenant_id,
                    "ids": [str(pk) for _, pk, _, _ in items],
                    "texts": [text for _, _, text, _ in items],
                    "vectors": [vector for _, _, _, vector in items],
                    "model": model,
                },
            )
            written = {str(row[0]) for row in cursor.fetchall()}
            count += len(written)
            left = [item for item in items if str(item[1]) not in written]
            if left:
                cursor.execute(
                    _WANTED_SQL,
                    {
                        "tenant": tenant_id,
                        "ids": [str(pk) for _, pk, _, _ in left],
                        "texts": [text for _, _, text, _ in left],
                        "model": model,
                    },
                )
                wanted = {str(row[0]) for row in cursor.fetchall()}
                rest += [item for item in left if str(item[1]) in wanted]
    return count, rest


class _Turn:
    """The tenant's embedding turn: a lease in PostgreSQL (core/leader.py), held across the
    model calls without a transaction or a session lock (so it works behind a
    transaction-pooling PgBouncer), renewed before each batch; a worker that dies gives it
    up after TURN_SECONDS."""

    def __init__(self, tenant_id: Any) -> None:
        self.name = f"memory.embed:{tenant_id}"
        self.holder = leader.holder_id()  # one per turn: two threads never share one
        self.held = leader.hold(self.name, self.holder, TURN_SECONDS)

    def renew(self) -> bool:
        """Still ours (renewed for another TURN_SECONDS)? False: it ran out and another
        worker has it."""
        self.held = leader.hold(self.name, self.holder, TURN_SECONDS)
        return self.held


@contextlib.contextmanager
def _tenant_turn(tenant_id: Any) -> Iterator[_Turn]:
    turn = _Turn(tenant_id)
    try:
        yield turn
    finally:
        if turn.held:
            leader.release(turn.name, turn.holder)
