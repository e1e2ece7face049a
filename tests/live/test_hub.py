"""The live hub: the sockets of one process that see the same thing share one read and one
render of an event (agents/live/hub.py), and never anything they may not see."""

from __future__ import annotations

import asyncio

import pytest

from agents.live import hub, render
from tenants.models import Role
from tenants.principal import Principal
from tests import factories
from tests.live.conftest import Socket, run_async, session_cookie, step

# --- sharing --------------------------------------------------------------------------------------


def test_sockets_asking_at_once_share_one_computation_and_its_answer():
    work = hub.SharedWork()
    calls = []

    async def make():
        calls.append(1)
        await asyncio.sleep(0.05)
        return "answer"

    async def scenario():
        answers = await asyncio.gather(*(work.shared("k", make) for _ in range(50)))
        later = await work.shared("k", make)  # a moment later: kept
        other = await work.shared("other", make)
        return answers, later, other

    answers, later, other = asyncio.run(scenario())
    assert answers == ["answer"] * 50 and later == "answer" and other == "answer"
    assert len(calls) == 2  # one for "k", one for "other"


def test_a_failure_reaches_every_socket_that_asked_and_is_not_kept():
    work = hub.SharedWork()
    calls = []

    async def refuse():
        calls.append(1)
        await asyncio.sleep(0.02)
        raise PermissionError("not yours")

    async def scenario():
        results = await asyncio.gather(
            *(work.shared("k", refuse) for _ in range(5)), return_exceptions=True
        )
        again = await asyncio.gather(work.shared("k", refuse), return_exceptions=True)
        return results, again

    results, again = asyncio.run(scenario())
    assert all(isinstance(r, PermissionError) for r in results + again)
    assert len(calls) == 2  # asked again after the failure, not answered from a cache


def test_an_answer_about_what_is_new_is_shared_only_while_it_is_read():
    work = hub.SharedWork()
    calls = []

    async def make():
        calls.append(1)
        await asyncio.sleep(0.02)
        return len(calls)

    async def scenario():
        together = await asyncio.gather(*(work.shared("k", make, keep=False) for _ in range(5)))
        return together, await work.shared("k", make, keep=False)

    together, later = asyncio.run(scenario())
    assert together == [1] * 5 and later == 2  # asked again afterwards: read again


def test_an_answer_is_kept_only_for_a_moment():
    work = hub.SharedWork(keep_seconds=0.05)
    calls = []

    async def make():
        calls.append(1)
        return len(calls)

    async def scenario():
        first = await work.shared("k", make)
        await asyncio.sleep(0.1)
        return first, await work.shared("k", make)

    assert asyncio.run(scenario()) == (1, 2)


@pytest.mark.django_db
def test_viewer_classes_set_end_users_apart_from_each_other_and_from_managers(tenant_a, tenant_b):
    def principal(tenant, role):
        user = factories.make_member(tenant, role).user
        return Principal.for_member(tenant=tenant, user=user, role=role)

    manager, other_manager = principal(tenant_a, Role.MANAGER), principal(tenant_a, Role.MANAGER)
    alice, bob = principal(tenant_a, Role.MEMBER), principal(tenant_a, Role.MEMBER)
    viewer, elsewhere = principal(tenant_a, Role.VIEWER), principal(tenant_b, Role.MANAGER)
    assert hub.viewer_class(manager) == hub.viewer_class(other_manager)
    assert hub.viewer_class(alice) != hub.viewer_class(bob)
    assert len({hub.viewer_class(p) for p in (manager, alice, viewer, elsewhere)}) == 4


# --- sockets ---------------------------------------------------------------------------------

pytestmark_sockets = pytest.mark.django_db(transaction=True)


@pytestmark_sockets
def test_one_event_is_read_once_for_every_socket_of_a_class_and_each_gets_it(
    tenant_a, start_run, monkeypatch
):
    alice = factories.make_member(tenant_a, Role.MEMBER)
    managers = [factories.make_member(tenant_a, Role.MANAGER) for _ in range(8)]
    cookies = [session_cookie(m.user) for m in managers]
    own = session_cookie(alice.user)
    run = start_run(alice)
    reads: list[str] = []
    real = render.run_update

    def counted(principal, run_id, after):
        reads.append(principal.role)
        return real(principal, run_id, after)

    monkeypatch.setattr(render, "run_update", counted)

    async def scenario():
        sockets = [Socket(cookie) for cookie in [*cookies, own]]
        for ws in sockets:
            await ws.__aenter__()
        try:
            for ws in sockets:
                await ws.subscribe("run", run=str(run.pk), after=2)
            for ws in sockets:
                assert await ws.nothing(timeout=0.3)
            reads.clear()
            await step(run)
            got = [await ws.receive_until('status-succeeded">Succeeded') for ws in sockets]
        finally:
            for ws in sockets:
                await ws.__aexit__(None, None, None)
        return got

    got = run_async(scenario)
    assert all(any('id="run-summary"' in part for part in parts) for parts in got)
    # Each event was read once for the eight managers and once for the run's own member,
    # never once per socket.
    assert reads.count(Role.MANAGER) <= reads.count(Role.MEMBER) + 2
    assert reads.count(Role.MANAGER) < 8


@pytestmark_sockets
def test_a_member_never_gets_the_update_read_for_managers_of_another_members_run(
    tenant_a, start_run
):
    alice = factories.make_member(tenant_a, Role.MEMBER)
    bob = factories.make_member(tenant_a, Role.MEMBER)
    manager = factories.make_member(tenant_a, Role.MANAGER)
    run = start_run(alice)
    cookies = {m: session_cookie(m.user) for m in (bob, manager)}

    async def scenario():
        async with Socket(cookies[manager]) as boss, Socket(cookies[bob]) as intruder:
            await boss.subscribe("run", run=str(run.pk), after=0)
            await intruder.subscribe("run", run=str(run.pk), after=0)
            assert "run-summary" in await boss.receive()
            await step(run)
            await boss.receive_until('status-succeeded">Succeeded')
            assert await intruder.nothing()

    run_async(scenario)


@pytestmark_sockets
def test_a_runs_list_event_is_read_once_for_every_managers_list_and_never_for_a_member_twice(
    tenant_a, start_run, monkeypatch
):
    alice = factories.make_member(tenant_a, Role.MEMBER)
    bob = factories.make_member(tenant_a, Role.MEMBER)
    managers = [factories.make_member(tenant_a, Role.MANAGER) for _ in range(6)]
    cookies = [session_cookie(m.user) for m in managers]
    bobs = session_cookie(bob.user)
    reads: list[str] = []
    real = render.runs_event

    def counted(principal, event):
        reads.append(principal.role)
        return real(principal, event)

    monkeypatch.setattr(render, "runs_event", counted)

    async def scenario():
        lists = [Socket(cookie) for cookie in cookies]
        other = Socket(bobs)
        for ws in [*lists, other]:
            await ws.__aenter__()
            await ws.subscribe("runs", filter="")
            await ws.receive()  # the table
            await ws.receive()  # the counts
        try:
            run = await asyncio.to_thread(start_run, alice)
            got = [await ws.receive_until(str(run.pk)) for ws in lists]
            assert await other.nothing()  # alice's run: bob's list hears nothing of it
        finally:
            for ws in [*lists, other]:
                await ws.__aexit__(None, None, None)
        return got

    got = run_async(scenario)
    assert all(parts for parts in got)
    events = reads.count(Role.MEMBER)  # bob's one socket reads each event once
    assert events >= 1 and reads.count(Role.MANAGER) <= events + 1
