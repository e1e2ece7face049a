"""Whatever a page (or anyone holding a session) sends the live socket, the socket stays up:
a malformed subscription is ignored (logged), a filter that names nothing shows nothing, and
no message ends in a server exception. Every feed's filter is fuzzed a little."""

from __future__ import annotations

import json
import logging

import pytest

from agents.live import render
from tenants.models import Role
from tests import factories
from tests.live.conftest import Socket, run_async, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

UUID = "7d3c7f7e-6a55-4c4b-9c61-1f0a3a8f2b10"

# Query strings a feed's page might name, most of them wrong.
FILTERS = [
    "request=not-a-uuid",
    "request=",
    "request=123",
    "request=%00",
    "request=%ff%fe",
    "request=" + "a" * 480,
    f"request={UUID}",
    f"request={UUID}&request=not-a-uuid",
    f"request={{{UUID}}}",
    f"request=urn:uuid:{UUID}",
    "request=-" + UUID.replace("-", "")[1:],
    "run=not-a-uuid",
    "run=",
    f"run={UUID}",
    "status=bogus",
    "status=%C3%28",
    "agent=../../etc/passwd",
    "after=garbage",
    "after=" + "Zm9v" * 50,
    "before=garbage",
    "before=2026-01-01T00:00:00Z|nope",
    "since=forever",
    "worker=../..",
    "worker=" + "x" * 450,
    "user=%20%20",
    "age=never",
    "stuck=maybe",
    "period=eon",
    "mine=maybe",
    "shown=xyz",
    "a=b=c&&&",
    "%",
    "%%%",
    "=",
    "&",
    "?request=x",
    "request=x#fragment",
    "\u2028=\u2029",
    "ü=ü",
    "&".join(["a"] * 240),
    "x" * 500,
]
# Values no page sends: wrong types, too long, characters JSON may carry but text must not.
WRONG_FILTERS = [42, None, [], {}, True, 1.5, "x" * 501, "request=\u0000", "a\ud800"]


def frames_for(kind: str) -> list[str]:
    frames = [json.dumps({"type": "subscribe", "kind": kind, "filter": f}) for f in FILTERS]
    frames += [json.dumps({"type": "subscribe", "kind": kind, "filter": f}) for f in WRONG_FILTERS]
    frames += [json.dumps({"type": "unsubscribe", "kind": kind, "filter": f}) for f in FILTERS[:3]]
    return frames


RUN_FRAMES = [
    json.dumps({"type": "subscribe", "kind": "run", **fields})
    for fields in [
        {"run": "not-a-uuid"},
        {"run": 42},
        {"run": None},
        {"run": [UUID]},
        {"run": {"id": UUID}},
        {"run": "-" + UUID.replace("-", "")[1:]},
        {"run": "x" * 4000},
        {"run": UUID, "after": 10**30},
        {"run": UUID, "after": 2**63},
        {"run": UUID, "after": -1},
        {"run": UUID, "after": 1.5},
        {"run": UUID, "after": "1"},
        {"run": UUID, "after": None},
        {"run": UUID, "after": True},
        {"run": UUID, "filter": "request=not-a-uuid"},
    ]
] + [json.dumps({"type": "unsubscribe", "kind": "run", "run": r}) for r in ["nope", 42, UUID]]

OTHER_FRAMES = [
    "",
    " ",
    "{",
    "null",
    "true",
    '"subscribe"',
    "[]",
    "[" * 5000 + "]" * 5000,
    '{"type": "subscribe", "kind": "approvals", "filter": NaN}',
    '{"type": "subscribe", "kind": "run", "run": "' + UUID + '", "after": Infinity}',
    json.dumps({"type": "subscribe", "kind": "no-such-feed"}),
    json.dumps({"type": "subscribe", "kind": None}),
    json.dumps({"type": "subscribe", "kind": 42}),
    json.dumps({"type": "subscribe", "kind": ["approvals"]}),
    json.dumps({"type": "subscribe", "kind": {"approvals": 1}}),
    json.dumps({"type": "subscribe", "kind": "__class__"}),
    json.dumps({"type": "subscribe", "kind": "feed"}),
    json.dumps({"type": "unsubscribe", "kind": "no-such-feed"}),
    json.dumps({"type": ["subscribe"], "kind": "approvals"}),
    json.dumps({"type": None, "kind": "approvals"}),
    json.dumps({"kind": "approvals"}),
    json.dumps({"type": "subscribe", "kind": "approvals", "filter": "x", "extra": "y" * 3000}),
    "x" * 1_000_000,
]


@pytest.fixture
def admin(tenant_a):
    return factories.make_member(tenant_a, Role.ADMIN)


def fuzz(cookie: str, frames: list[str], run, *, binary: bool = False) -> None:
    """Send every frame, then a good subscription: the socket answers it, so it is still up
    and no frame raised (a consumer's exception surfaces here, from receive_output)."""

    async def scenario():
        async with Socket(cookie) as ws:
            assert ws.connected
            for frame in frames:
                await ws.send(frame)
            if binary:
                await ws.ws.send_to(bytes_data=b"\x00\xff" * 100)
            await ws.subscribe("run", run=str(run.pk), after=0)
            await ws.receive_until('id="event-1"', timeout=30)

    run_async(scenario)


def no_errors_logged(caplog) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


def test_an_approvals_page_naming_a_request_that_is_not_a_uuid_shows_nothing_of_it(
    admin, start_run, caplog
):
    cookie = session_cookie(admin.user)
    run = start_run(admin)
    fuzz(
        cookie, [json.dumps({"type": "subscribe", "kind": "approvals", "filter": "request=x"})], run
    )
    no_errors_logged(caplog)


@pytest.mark.parametrize("kind", ["runs", "approvals", "console", "console_recovered", "chat"])
@pytest.mark.parametrize("role", [Role.ADMIN, Role.MEMBER])
def test_no_filter_of_a_feed_ends_the_socket(tenant_a, kind, role, start_run, caplog):
    assert kind in render.FEEDS or kind == "runs"
    member = factories.make_member(tenant_a, role)
    cookie = session_cookie(member.user)
    run = start_run(member)
    fuzz(cookie, frames_for(kind), run)
    no_errors_logged(caplog)


def test_every_registered_feed_is_fuzzed():
    fuzzed = {"approvals", "console", "console_recovered", "chat"}
    assert set(render.FEEDS) <= fuzzed, "add the new feed to the parametrize list above"


def test_no_run_subscription_or_other_frame_ends_the_socket(admin, start_run, caplog):
    cookie = session_cookie(admin.user)
    run = start_run(admin)
    fuzz(cookie, RUN_FRAMES + OTHER_FRAMES, run, binary=True)
    no_errors_logged(caplog)


@pytest.mark.parametrize("bad", ["not-a-uuid", "-" + UUID.replace("-", "")[1:], "", 42])
def test_a_lookup_by_something_that_is_not_a_uuid_is_not_found(admin, bad):
    """The selectors the feeds use answer 404 (what they answer for another tenant's id)
    when the id is no uuid at all, rather than Django's ValidationError."""
    from django.http import Http404

    from agents.runtime import selectors as runs
    from approvals import selectors as approvals
    from tenants.scope import tenant_scope

    principal = factories.principal_for(admin)
    with tenant_scope(admin.tenant_id):
        for lookup in (approvals.approval_request_for, runs.run_for, runs.session_for):
            with pytest.raises(Http404):
                lookup(principal, bad)
