"""Embedding facts without holding them: a fact a writer has locked is embedded, not skipped;
no write waits on the model; what changed while the model ran wins; one worker embeds a
tenant's facts at a time and the others leave theirs to it; the backfill catches leftovers.

These run on real connections in threads (committed data), with a stand-in model whose
vectors are a hash of the text and which can be made slow."""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from django.db import connection

from memory.facts import services
from memory.models import MemoryFact
from memory.search import indexing
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)
MODEL_BUSY = 3.0  # seconds the slow model takes; a write must finish well inside it
FAST = 1.0


def vector_of(text: str) -> list[float]:
    return [b / 255 + 0.01 for b in hashlib.sha256(text.encode()).digest()[:8]]


class Model:
    """A stand-in embedding provider: records its calls, can take its time."""

    name = "test:hash"

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls: list[list[str]] = []
        self.entered = threading.Event()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        self.entered.set()
        time.sleep(self.delay)
        return [vector_of(t) for t in texts]


@pytest.fixture
def model(monkeypatch):
    """The stand-in model for the embedding code; writes enqueue nothing (no worker here)."""
    stand_in = Model()
    monkeypatch.setattr(indexing, "get_provider", lambda: stand_in)
    monkeypatch.setattr(services, "get_provider", lambda: None)
    return stand_in


class Background(threading.Thread):
    """Call `fn` on a thread of its own (its own database connection); keep what it answers."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn, self.result, self.error = fn, None, None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc
        finally:
            connection.close()

    def outcome(self, timeout: float = 20) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "the background call did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def embed(ada, ids: Sequence[Any] = (), **kwargs: Any) -> Background:
    thread = Background(
        lambda: indexing.embed_facts(tenant_id=ada.tenant_id, fact_ids=ids, **kwargs)
    )
    thread.start()
    return thread


def hold_persons_facts(ada, locked: threading.Event, release: threading.Event) -> Background:
    """Another write's transaction: every live fact of the person locked FOR UPDATE."""

    def hold() -> None:
        with tenant_scope(ada.tenant_id):
            list(
                MemoryFact.objects.for_tenant(ada.tenant_id)
                .filter(subject_id=ada.user_id, valid_until__isnull=True)
                .select_for_update()
                .defer("embedding")
            )
            locked.set()
            release.wait(20)

    thread = Background(hold)
    thread.start()
    assert locked.wait(10)
    return thread


def row(fact) -> MemoryFact | None:
    with tenant_scope(fact.tenant_id):
        return MemoryFact.objects.for_tenant(fact.tenant_id).filter(pk=fact.pk).first()


def has_vector_of(fact, text: str) -> bool:
    found = row(fact)
    return (
        found is not None
        and found.embedding is not None
        and found.embedding_model == Model.name
        and np.allclose(np.asarray(found.embedding), vector_of(text), atol=1e-6)
    )


def timed(fn: Callable[[], Any]) -> float:
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def test_a_fact_another_write_holds_locked_is_embedded_not_skipped(members, model):
    ada = members["member"]
    fact = remember(ada, "Prefers to be contacted by email")
    locked, release = threading.Event(), threading.Event()
    holder = hold_persons_facts(ada, locked, release)
    task = embed(ada, [fact.pk])
    # The model runs while the other write still holds the fact: it waits for nothing.
    assert model.entered.wait(5) and not release.is_set()
    time.sleep(0.3)
    assert task.is_alive(), "the task gave up on (skipped) the locked fact"
    assert row(fact).embedding is None
    release.set()
    holder.outcome()
    assert task.outcome().embedded == 1
    assert has_vector_of(fact, "Prefers to be contacted by email")
    assert len(model.calls) == 1  # written after the lock went, not computed again


def test_a_fact_locked_by_a_write_in_progress_is_embedded_at_once_when_the_write_ends_first(
    members, model
):
    ada = members["member"]
    fact = remember(ada, "Lives in Lyon")
    model.delay = 0.5
    locked, release = threading.Event(), threading.Event()
    holder = hold_persons_facts(ada, locked, release)
    task = embed(ada, [fact.pk])
    assert model.entered.wait(5)
    release.set()  # the write commits while the model still runs
    holder.outcome()
    assert task.outcome().embedded == 1 and has_vector_of(fact, "Lives in Lyon")


def test_no_write_waits_on_the_model_supersede_edit_and_delete_finish_fast(members, model):
    ada = members["member"]
    keyed = remember(ada, "Prefers phone calls", key="contact.channel")
    edited = remember(ada, "Lives in Lyon", category="profile")
    deleted = remember(ada, "Likes jazz", category="note")
    model.delay = MODEL_BUSY
    task = embed(ada, max_batches=1)
    assert model.entered.wait(5) and len(model.calls[0]) == 3
    actor = factories.principal_for(ada)

    def edit() -> None:
        with tenant_scope(ada.tenant_id):
            services.fact_edit(actor=actor, fact=row(edited), text="Lives in Paris")

    def delete() -> None:
        with tenant_scope(ada.tenant_id):
            services.fact_delete(actor=actor, fact=row(deleted))

    supersede_s = timed(lambda: remember(ada, "Prefers email", key="contact.channel"))
    edit_s, delete_s = timed(edit), timed(delete)
    assert task.is_alive(), "the model was meant to be still busy"
    assert max(supersede_s, edit_s, delete_s) < FAST, (supersede_s, edit_s, delete_s)
    # The vectors came back for versions that are no longer live, or gone: none was written.
    assert task.outcome().embedded == 0
    assert row(keyed).embedding is None and row(edited).embedding is None
    assert row(deleted) is None


def test_an_edit_during_embedding_wins_and_its_new_text_gets_its_own_vector(members, model):
    ada = members["member"]
    old = remember(ada, "Lives in Lyon", category="profile")
    model.delay = 1.0
    task = embed(ada, [old.pk], max_batches=1)
    assert model.entered.wait(5)
    with tenant_scope(ada.tenant_id):
        new = services.fact_edit(
            actor=factories.principal_for(ada), fact=row(old), text="Lives in Paris"
        )
    assert task.outcome().embedded == 0
    assert row(new).embedding is None  # never the vector of "Lives in Lyon"
    model.delay = 0.0
    assert embed(ada, [new.pk]).outcome().embedded == 1
    assert has_vector_of(new, "Lives in Paris") and row(old).embedding is None


def test_a_text_changed_in_place_while_the_model_ran_is_not_given_the_stale_vector(members, model):
    ada = members["member"]
    fact = remember(ada, "Lives in Lyon", category="profile")
    model.delay = 1.0
    task = embed(ada, [fact.pk], max_batches=1)
    assert model.entered.wait(5)
    with tenant_scope(ada.tenant_id):
        MemoryFact.objects.for_tenant(ada.tenant_id).filter(pk=fact.pk).update(
            text="Lives in Paris", normalized="lives in paris"
        )
    assert task.outcome().embedded == 0 and row(fact).embedding is None


def test_a_second_task_leaves_its_fact_to_the_worker_embedding_the_tenant_which_embeds_it(
    members, model
):
    ada = members["member"]
    first = remember(ada, "Likes jazz", category="note")
    model.delay = 1.0
    holder = embed(ada, [first.pk])
    assert model.entered.wait(5)
    second = remember(ada, "Plays tennis on weekends", category="note")
    start = time.monotonic()
    assert embed(ada, [second.pk]).outcome().batches == 0  # left to the holder, at once
    assert time.monotonic() - start < FAST
    assert holder.outcome().embedded == 2
    assert has_vector_of(first, "Likes jazz")
    assert has_vector_of(second, "Plays tennis on weekends")


def test_a_task_embeds_every_waiting_fact_of_the_tenant_in_one_model_call(members, model):
    ada, bob = members["member"], members["viewer"]
    facts = [remember(ada, f"Note {n} about the garden", category="note") for n in range(5)]
    facts.append(remember(bob, "Prefers tea", category="preference"))
    done = embed(ada, [facts[0].pk]).outcome()
    assert (done.embedded, done.batches) == (6, 1) and len(model.calls) == 1
    # Twice the same task (at-least-once delivery): nothing left, nothing computed again.
    assert embed(ada, [facts[0].pk]).outcome().batches == 0 and len(model.calls) == 1


def test_the_backfill_embeds_leftovers_and_leaves_young_facts_to_their_task(members, model):
    ada = members["member"]
    left = remember(ada, "Was left without a vector", category="note")
    young = remember(ada, "Was just written", category="note")
    with tenant_scope(ada.tenant_id):
        MemoryFact.objects.for_tenant(ada.tenant_id).filter(pk=left.pk).update(
            created_at=left.created_at - dt.timedelta(minutes=5)
        )
    assert indexing.backfill() == 1
    assert has_vector_of(left, "Was left without a vector") and row(young).embedding is None
    assert indexing.backfill(grace=dt.timedelta(0)) == 1 and has_vector_of(
        young, "Was just written"
    )


class Sent:
    """Stands in for the embedding task: records what writes queue."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def delay(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)


def test_writes_queue_one_task_until_a_worker_reads_the_tenants_facts(members, model, monkeypatch):
    ada = members["member"]
    sent = Sent()
    monkeypatch.setattr(services, "get_provider", lambda: model)
    monkeypatch.setattr(services.tasks, "embed_facts", sent)
    remember(ada, "Likes jazz", category="note")
    remember(ada, "Plays tennis on weekends", category="note")
    assert len(sent.calls) == 1  # the second write leans on the task already queued
    assert embed(ada, sent.calls[0]["fact_ids"]).outcome().embedded == 2
    remember(ada, "Reads science fiction", category="note")
    assert len(sent.calls) == 2  # a worker has read since: this write queues its own


def test_the_tenants_embedding_turn_is_a_lease_a_dead_worker_gives_up_when_it_runs_out(members):
    from django.utils import timezone

    from core.models import LeaderLease

    tenant = members["member"].tenant_id
    first = indexing._Turn(tenant)
    assert first.held and not indexing._Turn(tenant).held  # one worker per tenant
    assert indexing._Turn(factories.make_tenant().pk).held  # turns are per tenant
    # The first worker died holding it: nobody gives it back, it runs out.
    LeaderLease.objects.filter(holder=first.holder).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    second = indexing._Turn(tenant)
    assert second.held and not first.renew()  # a worker that was only slow stops there
    assert second.renew()
