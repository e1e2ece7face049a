"""The live socket: who may connect, who sees which run, runs list and approvals feed, and
what happens to messages that make no sense. Real ASGI app, Redis layer and PostgreSQL."""

from __future__ import annotations

import logging
import re

import pytest
from channels.db import database_sync_to_async
from django.db import OperationalError

from tenants.models import Membership, Role
from tenants.scope import tenant_scope
from tests import factories
from tests.live.conftest import Socket, reload, run_async, session_cookie, step

pytestmark = pytest.mark.django_db(transaction=True)


def text(html: str) -> str:
    return re.sub(r"<[^>]+>", "", html)


@pytest.fixture
def alice(tenant_a):
    return factories.make_member(tenant_a, Role.MEMBER)


@pytest.fixture
def bob(tenant_a):
    return factories.make_member(tenant_a, Role.MEMBER)


@pytest.fixture
def cookies(alice, bob, members, outsider):
    """Logged-in browser cookies per membership, made before any async code runs."""
    everyone = [alice, bob, outsider, *members.values()]
    return {m: session_cookie(m.user) for m in everyone}


# --- connecting -----------------------------------------------------------------------------------


def test_an_anonymous_socket_is_closed_with_4401():
    async def scenario():
        async with Socket(None) as ws:
            assert await ws.closed_with() == 4401

    run_async(scenario)


def test_a_user_without_any_membership_is_closed_with_4403(db):
    cookie = session_cookie(factories.make_user())

    async def scenario():
        async with Socket(cookie) as ws:
            assert await ws.closed_with() == 4403

    run_async(scenario)


def test_a_socket_opened_from_another_site_is_refused_at_the_handshake(cookies, alice):
    async def scenario():
        async with Socket(cookies[alice], origin="https://evil.example") as ws:
            assert not ws.connected

    run_async(scenario)


# --- one run --------------------------------------------------------------------------------------


@pytest.fixture
def payments(monkeypatch):
    """The demo's payment provider, in process (the live tests run no web server)."""
    import dataclasses

    import agents.demo.refund_desk  # noqa: F401  (registers the demo's tools)
    from agents.runtime import tools

    made: list[dict] = []

    def refund(**kwargs):
        made.append(kwargs)
        return {
            "refund_id": f"re_{len(made)}",
            "order": kwargs["order"],
            "amount": kwargs["amount"],
        }

    tool = tools.get_tool("issue_refund")
    monkeypatch.setitem(tools._TOOLS, "issue_refund", dataclasses.replace(tool, fn=refund))
    return made


def test_a_member_follows_their_own_run_step_by_step(cookies, alice, start_run, payments):
    # Events 1 (queued) and 2 (the user's message); $40 needs no approval.
    run = start_run(alice, "Please refund $40 for order A-1002")

    async def scenario():
        async with Socket(cookies[alice]) as ws:
            await ws.subscribe("run", run=str(run.pk), after=2)
            assert await ws.nothing()  # the page is current: nothing to catch up
            await step(run, slice_seconds=0)  # model: claimed (3), finished (4)
            first = "".join(await ws.receive_until('data-seq="4"'))
            assert 'id="step-1"' in first and 'id="step-2"' in first  # done + the next one
            assert 'id="event-3"' in first and 'id="event-4"' in first
            # tools, model, tools, model: claimed (5), finished (6-9), then the transcript
            # (two tool calls, their results, the reply: one event for the five messages, 10)
            await step(run)
            second = "".join(await ws.receive_until('data-seq="10"'))
            assert "Finished after 5 steps" in text(second) and 'id="msg-6"' in second
            assert 'id="event-3"' not in second  # nothing is sent twice
            assert "Done: 40.00 refunded for order A-1002 (refund re_1)." in second

    run_async(scenario)
    assert len(payments) == 1


@pytest.mark.parametrize("who", ["outsider", "other member"])
def test_nobody_else_receives_anything_about_a_members_run(
    cookies, who, alice, bob, outsider, start_run
):
    run = start_run(alice)
    intruder = outsider if who == "outsider" else bob

    async def scenario():
        async with Socket(cookies[intruder]) as ws, Socket(cookies[alice]) as own:
            await ws.subscribe("run", run=str(run.pk), after=0)
            await own.subscribe("run", run=str(run.pk), after=2)
            assert await ws.nothing()  # refused: not even the catch-up
            await step(run)
            await own.receive_until('status-succeeded">Succeeded')  # the events did go out
            assert await ws.nothing()
            # The socket stays usable for what the intruder may see.
            await ws.subscribe("approvals")
            assert "approvals-badge" in await ws.receive()

    run_async(scenario)


def test_a_viewer_follows_a_run_but_is_offered_no_cancel_button(cookies, members, start_run):
    run = start_run(members[Role.MEMBER])

    async def scenario():
        async with Socket(cookies[members[Role.VIEWER]]) as viewer:
            async with Socket(cookies[members[Role.ADMIN]]) as admin:
                await viewer.subscribe("run", run=str(run.pk), after=0)
                await admin.subscribe("run", run=str(run.pk), after=0)
                seen_by_viewer = await viewer.receive()
                seen_by_admin = await admin.receive()
        assert 'id="run-summary"' in seen_by_viewer and "Cancel run" not in seen_by_viewer
        assert "Cancel run" in seen_by_admin

    run_async(scenario)


# --- the runs list --------------------------------------------------------------------------------


def test_the_runs_feed_shows_new_runs_and_their_status_but_members_only_their_own(
    cookies, alice, bob, members, start_run
):
    async def scenario():
        async with Socket(cookies[alice]) as mine, Socket(cookies[members[Role.VIEWER]]) as viewer:
            await mine.subscribe("runs", filter="")
            await viewer.subscribe("runs", filter="")
            for ws in (mine, viewer):
                assert 'id="runs-table"' in await ws.receive()
                assert 'id="run-counts"' in await ws.receive()
            theirs = await database_sync_to_async(start_run)(bob)
            assert f'id="run-row-{theirs.pk}"' in "".join(await viewer.receive_until("run-row"))
            assert await mine.nothing()  # another member's run: not a row, not a count
            own = await database_sync_to_async(start_run)(alice)
            row = "".join(await mine.receive_until(f"run-row-{own.pk}"))
            assert "Queued" in row and 'hx-swap-oob="afterbegin:#runs-tbody"' in row
            await step(own)
            updates = "".join(await mine.receive_until("Succeeded"))
            assert str(theirs.pk) not in updates

    run_async(scenario)


def test_the_runs_feed_of_another_tenant_hears_nothing(cookies, outsider, alice, start_run):
    async def scenario():
        async with Socket(cookies[outsider]) as ws:
            await ws.subscribe("runs", filter="")
            await ws.receive()
            await ws.receive()
            run = await database_sync_to_async(start_run)(alice)
            await step(run)
            assert await ws.nothing()

    run_async(scenario)


# --- the approvals feed ---------------------------------------------------------------------------


async def drain(ws: Socket) -> str:
    """Everything the socket has been sent until it goes quiet."""
    seen = []
    while not await ws.nothing(0.5):
        seen.append(await ws.receive())
    return "".join(seen)


def badge_of(html: str) -> str | None:
    found = re.search(r'<span id="approvals-badge"[^>]*>(\d*)', html)
    return found and found.group(1)


def test_the_approvals_feed_sends_the_inbox_and_badge_to_whom_the_pages_would_show_them(
    cookies, alice, bob, members, outsider, start_run
):
    """A request arrives: the managers' inboxes and badges change; a viewer's badge (they have
    none), another member's inbox and another tenant's inbox hear nothing. Then an admin
    decides it and the inbox and the request's page show that, without asking."""
    from django.test import Client

    refund = "Please refund $400 for order A-1001, I was charged twice"
    admin = Client()
    admin.force_login(members[Role.ADMIN].user)

    async def scenario():
        sockets = {
            "manager inbox": (Socket(cookies[members[Role.MANAGER]]), {"filter": ""}),
            "manager badge": (Socket(cookies[members[Role.MANAGER]]), {}),
            "viewer badge": (Socket(cookies[members[Role.VIEWER]]), {}),
            "alice inbox": (Socket(cookies[alice]), {"filter": ""}),
            "bob inbox": (Socket(cookies[bob]), {"filter": ""}),
            "outsider inbox": (Socket(cookies[outsider]), {"filter": ""}),
        }
        ws = {who: socket for who, (socket, _) in sockets.items()}
        for socket, fields in sockets.values():
            await socket.__aenter__()
            await socket.subscribe("approvals", **fields)
        first = {who: await drain(socket) for who, socket in ws.items()}
        assert (
            badge_of(first["manager inbox"]) == ""
            and "Nothing is waiting" in first["manager inbox"]
        )
        assert 'id="inbox-list"' not in first["manager badge"]
        assert badge_of(first["viewer badge"]) == ""  # they have no badge: it stays empty
        assert (
            'id="inbox-list"' in first["bob inbox"] and "approvals-badge" not in first["bob inbox"]
        )

        run = await database_sync_to_async(start_run)(alice, refund)
        await step(run)  # lookup, decide: waits for a manager's approval
        assert (await database_sync_to_async(reload)(run)).status == "waiting_approval"
        requested = {who: await drain(socket) for who, socket in ws.items()}
        inbox = requested["manager inbox"]
        assert 'id="inbox-list"' in inbox and "issue_refund" in inbox and "400" in inbox
        assert "You may decide" in inbox and badge_of(inbox) == "1"
        assert badge_of(requested["manager badge"]) == "1"
        assert 'id="inbox-list"' not in requested["manager badge"]
        mine = requested["alice inbox"]  # her own run: her list changes, she has no badge
        assert "issue_refund" in mine and "approvals-badge" not in mine
        for who in ("viewer badge", "bob inbox", "outsider inbox"):
            assert requested[who] == "", who

        request_id = re.search(r'href="/approvals/([0-9a-f-]{36})/"', inbox).group(1)
        page = Socket(cookies[members[Role.MANAGER]])
        await page.__aenter__()
        await page.subscribe("approvals", filter=f"request={request_id}")
        shown = await drain(page)
        assert 'id="approval-live"' in shown and "Approve</button>" in shown
        assert 'id="inbox-list"' not in shown and badge_of(shown) == "1"  # and the nav badge

        url = f"/approvals/{request_id}/decide/"
        decided = await database_sync_to_async(admin.post)(url, {"decision": "approve"})
        assert decided.status_code == 302
        # What the inbox shows once the decision reached it: on a loaded machine the request's
        # own update can still be on its way when the drain above went quiet, so the badge is
        # the last one sent, as the page shows the last.
        seen = await ws["manager inbox"].receive_until("Nothing is waiting")
        inbox = "".join(seen) + await drain(ws["manager inbox"])
        assert re.findall(r'<span id="approvals-badge"[^>]*>(\d*)', inbox)[-1] == ""
        detail = await drain(page)
        assert "Approved by <strong>" in detail and "Approve</button>" not in detail
        assert badge_of(detail) == ""
        for who in ("viewer badge", "bob inbox", "outsider inbox"):
            assert await ws[who].nothing(), who
        for socket in [*ws.values(), page]:
            await socket.__aexit__()

    run_async(scenario)


# --- bad input ------------------------------------------------------------------------------------

A_RUN = '"run": "7d3c7f7e-6a55-4c4b-9c61-1f0a3a8f2b10"'
MALFORMED = [
    "not json",
    "[1, 2]",
    '{"type": "subscribe"}',
    '{"type": "hello", "kind": "run"}',
    '{"type": "subscribe", "kind": "everything"}',
    '{"type": "subscribe", "kind": "run", "run": "not-a-uuid"}',
    '{"type": "subscribe", "kind": "run", ' + A_RUN + ', "after": -1}',
    '{"type": "subscribe", "kind": "run", ' + A_RUN + ', "after": "1"}',
    '{"type": "subscribe", "kind": "runs", "filter": 42}',
    '{"type": "subscribe", "kind": "approvals", "pad": "' + "x" * 5000 + '"}',
]


def test_malformed_messages_are_ignored_and_logged_and_the_socket_stays_usable(
    cookies, alice, start_run, caplog
):
    run = start_run(alice)
    caplog.set_level(logging.WARNING, logger="agents.live.consumers")

    async def scenario():
        async with Socket(cookies[alice]) as ws:
            for text in MALFORMED:
                await ws.send(text)
            await ws.ws.send_to(bytes_data=b"\x00\x01")
            assert await ws.nothing()
            await ws.subscribe("run", run=str(run.pk), after=0)
            caught_up = await ws.receive()
        assert 'id="event-1"' in caught_up and 'id="event-2"' in caught_up

    run_async(scenario)
    ignored = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(ignored) == len(MALFORMED) + 1


def test_an_unknown_or_invisible_run_is_refused_and_logged(cookies, alice, caplog):
    caplog.set_level(logging.WARNING, logger="agents.live.consumers")

    async def scenario():
        async with Socket(cookies[alice]) as ws:
            await ws.subscribe("run", run="7d3c7f7e-6a55-4c4b-9c61-1f0a3a8f2b10", after=0)
            assert await ws.nothing()

    run_async(scenario)
    assert any(re.search("subscription refused", r.getMessage()) for r in caplog.records)


def test_a_member_whose_membership_is_removed_is_closed_at_the_next_subscription(
    cookies, alice, start_run
):
    run = start_run(alice)

    def remove():
        with tenant_scope(alice.tenant_id):
            Membership.objects.for_tenant(alice.tenant_id).filter(pk=alice.pk).delete()

    async def scenario():
        async with Socket(cookies[alice]) as ws:
            await ws.subscribe("run", run=str(run.pk), after=2)
            assert await ws.nothing()
            await database_sync_to_async(remove)()
            await ws.subscribe("run", run=str(run.pk), after=0)
            assert await ws.closed_with() == 4403

    run_async(scenario)


def test_a_subscription_that_loses_the_database_closes_the_socket_with_1013_not_a_traceback(
    cookies, alice, start_run, monkeypatch, caplog
):
    caplog.set_level(logging.WARNING, logger="agents.live.consumers")
    run = start_run(alice)

    def lost(view):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("agents.live.render.run_catch_up", lost)

    async def scenario():
        async with Socket(cookies[alice]) as ws:
            await ws.subscribe("run", run=str(run.pk), after=0)
            # 1013 (try again later): the page's ws extension reconnects with backoff and
            # subscribes again with the last event it shows.
            assert await ws.closed_with() == 1013

    run_async(scenario)
    assert any("closing it with 1013" in r.getMessage() for r in caplog.records)
