"""The hot session cache in (real) Redis: miss, hit, write-through, invalidation, TTL and
tenant separation. PostgreSQL stays the source of truth."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from agents.conversations import cache
from agents.conversations.packing.build import load_thread
from agents.conversations.summary import session_summarise
from agents.runtime import services
from agents.runtime.llm import ScriptedModel
from core.tokens import tokenizer_for
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.test_api import open_session

pytestmark = pytest.mark.django_db

TOKENIZER = tokenizer_for("gpt-4")


def append(session, *contents: str, role: str = "user") -> None:
    with tenant_scope(session.tenant_id):
        services.messages_append(
            tenant_id=session.tenant_id,
            session_id=session.pk,
            run_id=None,
            messages=[{"role": role, "content": c} for c in contents],
        )


def load(session, tenant_id=None):
    return load_thread(
        tenant_id=tenant_id or session.tenant_id, session_id=session.pk, tokenizer=TOKENIZER
    )


def contents(thread) -> list[str]:
    return [m["content"] for m in thread.messages]


@pytest.fixture
def session(members, django_capture_on_commit_callbacks):
    session = open_session(members["member"])
    with django_capture_on_commit_callbacks(execute=True):
        append(session, "refund $400", "which order?")
    return session


def test_a_miss_rebuilds_from_postgresql_and_the_next_read_hits_without_a_query(
    session, django_assert_num_queries
):
    thread, hit = load(session)
    assert not hit and contents(thread) == ["refund $400", "which order?"]
    assert all(m["tokens"] > 3 for m in thread.messages)  # counted once, kept in Redis
    with django_assert_num_queries(0):
        again, hit = load(session)
    assert hit and contents(again) == contents(thread)
    assert [m["tokens"] for m in again.messages] == [m["tokens"] for m in thread.messages]


def test_keys_name_the_tenant_and_the_ttl_is_extended_on_every_use(session):
    load(session)
    meta, messages, _ = cache.keys(session.tenant_id, session.pk)
    assert str(session.tenant_id) in meta and str(session.pk) in meta
    client = cache.client()
    assert 3590 < client.ttl(meta) <= 3600  # the tenant's session_cache_ttl_seconds: 1 h
    client.expire(meta, 5)
    client.expire(messages, 5)
    load(session)
    assert client.ttl(meta) > 3590 and client.ttl(messages) > 3590


def test_a_write_goes_to_postgresql_first_then_extends_the_cached_thread(
    session, django_capture_on_commit_callbacks, django_assert_num_queries
):
    load(session)
    with django_capture_on_commit_callbacks(execute=False) as pending:
        append(session, "A-1001")
    assert contents(load(session)[0]) == ["refund $400", "which order?"]  # not yet committed
    for callback in pending:
        callback()
    with django_assert_num_queries(0):
        thread, hit = load(session)
    assert hit and contents(thread) == ["refund $400", "which order?", "A-1001"]
    assert thread.count == 3


def test_a_write_the_cache_cannot_follow_in_order_invalidates_it(session):
    load(session)
    cache.messages_appended(
        tenant_id=session.tenant_id,
        session_id=session.pk,
        messages=[{"pos": 9, "role": "user", "content": "out of order"}],
    )
    thread, hit = load(session)
    assert not hit and contents(thread) == ["refund $400", "which order?"]


def test_a_new_summary_invalidates_the_cache_and_the_rebuild_carries_it(
    session, settings, django_capture_on_commit_callbacks
):
    settings.AGENTSTATE_SUMMARY_KEEP_TURNS = 1
    with django_capture_on_commit_callbacks(execute=True):
        append(session, "A-1001", role="user")
    load(session)
    with django_capture_on_commit_callbacks(execute=True):
        session_summarise(
            tenant_id=session.tenant_id,
            session_id=session.pk,
            model=ScriptedModel([], default="Refund of $400 asked."),
        )
    thread, hit = load(session)
    assert not hit and thread.summary.startswith("Refund of $400 asked.")
    assert thread.summary_upto == 2 and contents(thread) == ["A-1001"]


def test_a_rebuild_that_races_a_write_is_not_stored(session):
    def racing_rebuild():
        cache.messages_appended(  # a write commits while the rebuild reads
            tenant_id=session.tenant_id,
            session_id=session.pk,
            messages=[{"pos": 3, "role": "user", "content": "late"}],
        )
        with tenant_scope(session.tenant_id):
            from agents.conversations.threads import thread_state

            return thread_state(tenant_id=session.tenant_id, session_id=session.pk)

    thread, hit = cache.load(
        tenant_id=session.tenant_id, session_id=session.pk, rebuild=racing_rebuild
    )
    assert not hit and thread is not None
    assert cache.client().exists(cache.keys(session.tenant_id, session.pk)[0]) == 0


def test_another_tenant_never_reads_this_tenants_cached_thread(session, tenant_b):
    load(session)  # cached for tenant A
    thread, hit = load(session, tenant_id=tenant_b.pk)
    assert thread is None and not hit  # its own key, rebuilt under its own RLS: nothing
    assert cache.keys(tenant_b.pk, session.pk)[0] != cache.keys(session.tenant_id, session.pk)[0]
    # Tenant B's own conversation with the same shape stays its own.
    other = open_session(factories.make_member(tenant_b))
    append(other, "globex only")
    assert contents(load(other)[0]) == ["globex only"]
    assert contents(load(session)[0]) == ["refund $400", "which order?"]


def test_without_redis_the_context_is_read_from_postgresql(session, monkeypatch):
    nowhere = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    monkeypatch.setattr(cache, "_client", nowhere)
    monkeypatch.setattr(cache, "_scripts", {})
    thread, hit = load(session)
    assert not hit and contents(thread) == ["refund $400", "which order?"]
