"""The ASGI app at /mcp: the SDK's streamable HTTP app behind our Host and Origin checks,
its session manager started on first use, and outages answered 503 (see server.py)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
from typing import Any

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from core import outage
from memory.mcp.context import PATH, request_state

logger = logging.getLogger(__name__)

# --- the ASGI app at /mcp ----------------------------------------------------------------------


class McpApplication:
    """The SDK's streamable HTTP app, behind Django's Host check and an Origin check.

    The SDK's session manager must run (a task group) before it serves. The servers here run
    without an ASGI lifespan (Channels' ProtocolTypeRouter has none; the tests' uvicorn runs
    with `--lifespan off`), so it is started on the first request, once per event loop, in a
    task of its own that lives as long as the loop (uvicorn cancels it at shutdown).
    """

    def __init__(self) -> None:
        self._started: dict[asyncio.AbstractEventLoop, _Started] = {}

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        refusal = _refuse_host_or_origin(Headers(scope=scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        app = await self._app()
        state: dict[str, Any] = {}
        token = request_state.set(state)
        try:
            await app(scope, receive, _refusals_explained(state, send))
        finally:
            request_state.reset(token)

    async def _app(self) -> ASGIApp:
        loop = asyncio.get_running_loop()
        started = self._started.get(loop)
        if started is None:
            for old in [old for old in self._started if old.is_closed()]:
                del self._started[old]
            started = self._started[loop] = _Started(loop)
        await started.ready.wait()
        if started.error is not None:
            raise RuntimeError("the MCP session manager did not start") from started.error
        return started.app


class _Started:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # The server brings the MCP SDK, 1.5-2.4 s to import: a web process loads it as it
        # starts (config/asgi.py, WEB_PRELOAD_MCP) or here, at its first MCP request.
        from mcp.server.transport_security import TransportSecuritySettings

        # Not at the top of the module: the SDK comes with it (see above).
        from memory.mcp.server import build_server

        self.app = build_server().streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=True,
            json_response=True,
            max_request_body_size=settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
            # Host and Origin are checked with Django's settings, before the SDK sees a request.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.ready = asyncio.Event()
        self.error: BaseException | None = None
        # A context of its own: the manager's tasks must not inherit the first request's.
        self.task = loop.create_task(self._run(), context=contextvars.Context())

    async def _run(self) -> None:
        try:
            async with self.app.router.lifespan_context(self.app):
                self.ready.set()
                await asyncio.Event().wait()  # until the loop shuts down
        except BaseException as exc:
            if not self.ready.is_set():
                self.error = exc
                self.ready.set()
            raise


def _refusals_explained(state: dict[str, Any], send: Send) -> Send:
    """The SDK's 401 said only "Authentication required". A token refused for a reason its
    holder can act on (revoked, expired, no longer a member) says why, in the same OAuth body;
    a 401 of a token that could not be checked for an outage becomes the 503 every other
    surface answers (core/outage.py), with Retry-After."""

    async def guarded(message: Message) -> None:
        if message["type"] == "http.response.start" and "outage" in state:
            state["replaced"] = True
            _log_outage(state["outage"])
            body = json.dumps({"code": "unavailable", "message": outage.MESSAGE}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", str(outage.RETRY_AFTER_SECONDS).encode()),
                        (b"cache-control", b"no-store"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
        elif (
            message["type"] == "http.response.start"
            and message["status"] == 401
            and state.get("refused")
        ):
            reason = state["refused"]
            body = json.dumps(
                {"error": "invalid_token", "error_description": reason, "code": "unauthenticated"}
            ).encode()
            state["replaced"] = True
            headers = [(k, v) for k, v in message["headers"] if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**message, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        elif not state.get("replaced"):
            await send(message)

    return guarded


_last_logged = [0.0]


def _log_outage(exc: BaseException) -> None:
    now = time.monotonic()
    if now - _last_logged[0] > 10:  # an outage fails every request: say so, not a thousand times
        _last_logged[0] = now
        logger.warning("answering 503 on %s: %s: %s", PATH, type(exc).__name__, exc)


def _refuse_host_or_origin(headers: Headers) -> JSONResponse | None:
    """Django's ALLOWED_HOSTS for the Host, and no page of another site (DNS rebinding)."""
    domain, _ = split_domain_port(headers.get("host", ""))
    allowed = settings.ALLOWED_HOSTS
    if not allowed and settings.DEBUG:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    if not domain or not validate_host(domain, allowed):
        return JSONResponse({"error": "invalid_request", "message": "Bad Host."}, status_code=400)
    origin = headers.get("origin")
    if origin is not None and origin not in settings.CSRF_TRUSTED_ORIGINS:
        origin_domain, _ = split_domain_port(origin.partition("://")[2])
        if not origin_domain or not validate_host(origin_domain, allowed):
            return JSONResponse(
                {"error": "invalid_request", "message": "Origin not allowed."}, status_code=403
            )
    return None


application = McpApplication()
