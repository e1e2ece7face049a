"""Helpers for live-progress tests: real sockets on the real ASGI application, real Redis
channel layer, real PostgreSQL, runs driven in this process by the engine."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.db import database_sync_to_async
from django.db import connections
from django.test import Client

from agents.live.broadcast import flush
from agents.runtime.engine.runner import drive
from agents.runtime.models import Run, RunEventLog
from agents.runtime.services import conversation_start
from tenants.scope import tenant_scope
from tests import factories

# Long enough for an event to travel worker -> Redis -> consumer -> socket on a busy machine.
WAIT = 5.0


class WebsocketCommunicator(ApplicationCommunicator):
    """channels.testing.WebsocketCommunicator, minus the import of daphne (not installed:
    `channels.testing` imports its live-server helper, which needs it)."""

    def __init__(self, application: Any, path: str, headers: list) -> None:
        scope = {"type": "websocket", "path": path, "query_string": b"", "headers": headers}
        scope["subprotocols"] = []
        super().__init__(application, scope)

    async def connect(self, timeout: float = 1) -> tuple[bool, Any]:
        await self.send_input({"type": "websocket.connect"})
        response = await self.receive_output(timeout)
        if response["type"] == "websocket.close":
            return False, response.get("code", 1000)
        return True, response.get("subprotocol")

    async def send_to(self, text_data: str | None = None, bytes_data: bytes | None = None):
        if text_data is not None:
            await self.send_input({"type": "websocket.receive", "text": text_data})
        else:
            await self.send_input({"type": "websocket.receive", "bytes": bytes_data})

    async def disconnect(self, code: int = 1000, timeout: float = 1) -> None:
        await self.send_input({"type": "websocket.disconnect", "code": code})
        await self.wait(timeout)


def run_async(scenario):
    """Run the scenario's event loop in a thread of its own: the browser tests' Playwright
    keeps a loop running in this one."""

    async def closing():
        try:
            return await scenario()
        finally:  # the consumers' database thread outlives the test: let the test DB go
            await database_sync_to_async(connections.close_all)()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, closing()).result()


def session_cookie(user) -> str:
    """A logged-in browser's cookies (made before the async part: it writes the session)."""
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}; csrftoken=testtoken"


class Socket:
    """A browser's live socket: `async with Socket(cookie) as ws` (see `session_cookie`)."""

    def __init__(self, cookie: str | None, *, origin: str = "http://testserver") -> None:
        from config.asgi import application

        headers = [(b"origin", origin.encode()), (b"host", b"testserver")]
        if cookie is not None:
            headers.append((b"cookie", cookie.encode()))
        self.ws = WebsocketCommunicator(application, "/ws/live/", headers=headers)
        self.connected = False
        self.close_code: int | None = None

    async def __aenter__(self) -> Socket:
        self.connected, _ = await self.ws.connect(timeout=WAIT)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.ws.disconnect()

    async def send(self, message: Any) -> None:
        text = message if isinstance(message, str) else json.dumps(message)
        await self.ws.send_to(text_data=text)

    async def subscribe(self, kind: str, **fields: Any) -> None:
        await self.send({"type": "subscribe", "kind": kind, **fields})

    async def receive(self, timeout: float = WAIT) -> str:
        output = await self.ws.receive_output(timeout)
        if output["type"] == "websocket.close":
            self.close_code = output.get("code")
            raise AssertionError(f"closed with {self.close_code}")
        return output["text"]

    async def closed_with(self) -> int:
        output = await self.ws.receive_output(WAIT)
        assert output["type"] == "websocket.close", output
        return output.get("code")

    async def receive_until(self, needle: str, timeout: float = WAIT) -> list[str]:
        """Every message up to and including the first that contains `needle`."""
        seen: list[str] = []
        while True:
            seen.append(await self.receive(timeout))
            if needle in seen[-1]:
                return seen

    async def nothing(self, timeout: float = 1.0) -> bool:
        return await self.ws.receive_nothing(timeout=timeout, interval=0.05)


@pytest.fixture
def start_run():
    """Start the demo agent's run as `membership` (in a conversation, like the console)."""

    def start(membership, message: str = "hello") -> Run:
        principal = factories.principal_for(membership)
        with tenant_scope(principal.tenant.pk):
            return conversation_start(
                principal=principal, agent="refund_desk", message=message, title="test"
            )

    return start


def step_sync(run: Run, **kwargs: Any):
    result = drive(tenant_id=str(run.tenant_id), run_id=run.pk, worker="w-test", **kwargs)
    flush()  # the live messages of this drive are in Redis when this returns
    return result


step = database_sync_to_async(step_sync)


@pytest.fixture(autouse=True, scope="session")
def _asgi_application():
    """config.asgi imported before any test's call: its first import configures logging again,
    which drops caplog's handler from the root logger (serially an earlier test imported it;
    on an xdist worker a live test may be the first). The test process warms no model."""
    from django.test import override_settings

    with override_settings(MEMORY_WARM_QUERY_MODEL=False):
        import config.asgi  # noqa: F401


@pytest.fixture(autouse=True)
def _no_queue(monkeypatch):
    """The engine's enqueue goes nowhere: tests drive runs by hand."""
    monkeypatch.setattr("agents.runtime.queue.enqueue_run", lambda **kwargs: None)


def events_of(run: Run) -> list[tuple[int, str]]:
    with tenant_scope(run.tenant_id):
        rows = RunEventLog.objects.for_tenant(run.tenant_id).filter(run=run).order_by("seq")
        return list(rows.values_list("seq", "kind"))


def reload(run: Run) -> Run:
    with tenant_scope(run.tenant_id):
        return Run.objects.for_tenant(run.tenant_id).get(pk=run.pk)
