"""Progress events: stored with the write they describe, numbered 1, 2, 3... per run, sent
after commit, and read back by number so a page misses nothing and shows nothing twice."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

from agents.live import render
from agents.live.broadcast import run_group
from agents.runtime import progress
from agents.runtime.engine import store
from agents.runtime.engine.runner import drive
from agents.runtime.models import Run, RunEventLog
from tenants.models import Role
from tenants.scope import tenant_scope
from tests import factories
from tests.live.conftest import (
    Socket,
    events_of,
    reload,
    run_async,
    session_cookie,
    step_sync,
)

pytestmark = pytest.mark.django_db(transaction=True)

PAST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
REFUND = "Please refund $400 for order A-1001, I was charged twice"


@pytest.fixture
def alice(tenant_a):
    return factories.make_member(tenant_a, Role.MEMBER)


@pytest.fixture
def sent():
    """Every event handed to subscribers (after commit), in order."""
    seen: list[dict] = []
    progress.subscribe(seen.append)
    yield seen
    progress.unsubscribe(seen.append)


def test_every_event_of_a_run_is_numbered_one_more_than_the_one_before(alice, start_run, sent):
    run = start_run(alice, REFUND)
    step_sync(run)  # model, tools, model, tools: waits for approval
    assert reload(run).status == "waiting_approval"
    stored = events_of(run)
    assert stored == [
        (1, "run.queued"),
        (2, "message.appended"),
        (3, "step.started"),
        (4, "step.finished"),
        (5, "step.finished"),
        (6, "step.finished"),
        (7, "step.finished"),
        (8, "approval.requested"),
    ]
    assert reload(run).event_seq == 8
    durable = [e["seq"] for e in sent if e["run_id"] == str(run.pk) and "seq" in e]
    assert durable == [1, 2, 3, 4, 5, 6, 7, 8]


def test_an_event_is_stored_in_the_transaction_of_its_write_and_rolls_back_with_it(
    alice, start_run, sent
):
    run = start_run(alice)
    before = len(sent)
    with pytest.raises(RuntimeError), tenant_scope(run.tenant_id), transaction.atomic():
        number = progress.publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.status")
        assert number == 3
        raise RuntimeError("the write fails")
    assert events_of(run)[-1] == (2, "message.appended") and reload(run).event_seq == 2
    assert len(sent) == before  # nothing was sent for a write that never happened
    with tenant_scope(run.tenant_id):
        assert progress.publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.status") == 3


def test_events_are_sent_after_commit_never_before(alice, start_run, sent):
    run = start_run(alice)
    before = len(sent)
    with tenant_scope(run.tenant_id):
        progress.publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.status", status="x")
        assert len(sent) == before  # still inside the transaction
    assert sent[-1]["seq"] == 3 and sent[-1]["status"] == "x"


def test_a_superseded_worker_writes_no_event(alice, start_run):
    run = start_run(alice)
    tenant = str(run.tenant_id)
    stale = store.claim(tenant_id=tenant, run_id=run.pk, worker="stale", lease_seconds=0.01)
    assert stale is not None and stale.event_seq == 3
    with tenant_scope(tenant):  # the lease expires
        Run.objects.for_tenant(tenant).filter(pk=run.pk).update(lease_expires_at=PAST)
    assert drive(tenant_id=tenant, run_id=run.pk, worker="fresh").status == "succeeded"
    numbers = [seq for seq, _ in events_of(run)]
    params = {"tenant": tenant, "run": str(run.pk), "version": stale.version, "worker": "stale"}
    assert store.execute_fenced(store.CANCEL_SQL, params) is None  # fenced: no row, no event
    assert [seq for seq, _ in events_of(run)] == numbers == list(range(1, len(numbers) + 1))


def test_live_tokens_are_sent_while_the_model_answers_but_never_stored(
    alice, start_run, sent, settings
):
    settings.AGENTSTATE_LIVE_TOKEN_INTERVAL_SECONDS = 0
    run = start_run(alice)
    step_sync(run)
    live = [e for e in sent if e["run_id"] == str(run.pk) and e["kind"].startswith("llm.")]
    assert live[0]["kind"] == "llm.started" and live[-1]["kind"] == "llm.finished"
    tokens = [e["text"] for e in live if e["kind"] == "llm.token"]
    assert len(tokens) > 5 and tokens[-1].startswith("Hello, this is the refund desk.")
    assert all(e["seq"] is None for e in live if "seq" in e)
    # The step the call belongs to (the first, model) started with event 3 (step.started).
    assert {e["after"] for e in live} == {3}
    assert not [k for _, k in events_of(run) if k.startswith("llm.")]


def test_catch_up_returns_exactly_the_events_after_the_last_one_seen(alice, start_run):
    run = start_run(alice, REFUND)
    step_sync(run)
    principal = factories.principal_for(alice)
    view = render.RunView(principal=principal, run_id=str(run.pk), after=3)
    [html] = render.run_catch_up(view)
    assert re.findall(r'<li id="event-(\d+)"', html) == ["4", "5", "6", "7", "8"]
    assert view.after == 8 and 'data-seq="8"' in html
    assert render.run_catch_up(view) == []  # nothing new: nothing sent


def test_a_socket_that_missed_live_messages_gets_each_from_the_database_exactly_once(
    alice, start_run
):
    run = start_run(alice, REFUND)
    cookie = session_cookie(alice.user)
    group = run_group(run.pk)

    async def scenario():
        async with Socket(cookie) as ws:
            await ws.subscribe("run", run=str(run.pk), after=2)
            assert await ws.nothing(0.5)
            # Steps commit while their live messages are lost (as in a Redis hiccup)...
            await database_sync_to_async(_drive_silently)(run)
            assert await ws.nothing(0.5)
            # ...the next message, even a stale duplicate of the last, brings the rest.
            poke = {"type": "live.event", "run_id": str(run.pk), "kind": "step.finished"}
            await get_channel_layer().group_send(group, {**poke, "seq": 8})
            html = await ws.receive()
            assert re.findall(r'<li id="event-(\d+)"', html) == ["3", "4", "5", "6", "7", "8"]
            await get_channel_layer().group_send(group, {**poke, "seq": 8})
            await get_channel_layer().group_send(group, {**poke, "seq": 4})
            assert await ws.nothing(0.5)  # already shown: nothing twice

    run_async(scenario)


def _drive_silently(run: Run) -> None:
    subscribers = list(progress._subscribers)
    progress._subscribers.clear()
    try:
        drive(tenant_id=str(run.tenant_id), run_id=run.pk, worker="w")
    finally:
        progress._subscribers.extend(subscribers)
    with tenant_scope(run.tenant_id):
        assert RunEventLog.objects.for_tenant(run.tenant_id).filter(run=run).count() == 8


def test_a_step_that_says_several_messages_records_one_event_and_the_page_shows_each(
    alice, start_run, sent
):
    from agents.runtime.services import messages_append

    run = start_run(alice, "hello")
    before = reload(run).event_seq
    with transaction.atomic(), tenant_scope(run.tenant_id):
        appended = messages_append(
            tenant_id=run.tenant_id,
            session_id=run.session_id,
            run_id=run.pk,
            messages=[
                {"role": "assistant", "content": "Looking it up."},
                {"role": "tool", "content": "{}", "tool_call": {"id": "c1", "name": "x"}},
                {"role": "assistant", "content": "Done."},
            ],
        )
    first, last = appended[0].seq, appended[-1].seq
    assert last == first + 2
    assert events_of(run)[before:] == [(before + 1, "message.appended")]
    assert reload(run).event_seq == before + 1
    [event] = [e for e in sent if e["run_id"] == str(run.pk) and e["seq"] == before + 1]
    assert (event["message_seq"], event["last_message_seq"], event["role"]) == (
        first,
        last,
        "agent",
    )

    view = render.RunView(
        principal=factories.principal_for(alice), run_id=str(run.pk), after=before
    )
    [html] = render.run_catch_up(view)
    for seq in range(first, last + 1):
        assert f'id="msg-{seq}"' in html
    assert f"Messages {first} to {last} from the agent" in html
