"""`POST /api/v1/langgraph/steps`: what `AgentStateSaver` saves per step (a checkpoint and the
pending writes it buffered for it, in order) in one request and one transaction.

It is the door a graph's every step goes through, so it is served lean: config/asgi.py routes
the path here before Django's middleware (as /mcp is), and one thread call authenticates the
API key, counts the steps in the tenant's `langgraph` rate bucket and applies the batch
(agents.runtime.external.external_steps) inside the key's tenant scope, with a validator of
its own instead of serializers. Errors have the API's body and stable codes. The same answer
is also reachable through Django (`steps_view`, for the test client and the schema).

Body: {"ops": [{"op": "put", <checkpoint>} | {"op": "writes", <a task's writes>}, ...]};
bytes as base64. Answer 200 {"saved": [{"checkpoint_id", "run_id"}, ...]}.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection, connections
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from agents.runtime import external, external_fast
from agents.runtime.errors import ThreadDrivenElsewhere
from core import json_input, outage
from core.errors import AppError, BadInput, PayloadTooLarge
from tenants import scope, throttling
from tenants.api_auth import KeyRefused, api_key_resolve
from tenants.audit import audit_record
from tenants.models import ApiKey
from tenants.principal import Principal
from tenants.rates import LANGGRAPH
from tenants.scope import transaction_scope

logger = logging.getLogger(__name__)

PATH = "/api/v1/langgraph/steps"
MAX_OPS = 1000
JSON_HEADERS = [(b"content-type", b"application/json"), (b"x-content-type-options", b"nosniff")]


class Refused(AppError):
    """An answer other than success, with the API's code and status."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.extra = status, code, extra


def max_bytes() -> int:
    return settings.LANGGRAPH_MAX_REQUEST_BYTES


def answer(
    authorization: str,
    body: bytes,
    *,
    after: list[Callable[[], None]] | None = None,
    counted: bool = False,
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, JSON body, headers) for one request; never raises for bad input. `after`:
    where the one-statement path leaves its live events, to be sent once the answer is
    (they are stored with the step; without `after`, they are sent at once). `counted`: its
    steps are counted in the rate bucket already (by the event loop's attempt)."""
    try:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refused(401, "unauthenticated", "Use `Authorization: Bearer <api key>`.")
        if len(body) > max_bytes():
            raise _too_large()
        ops = parse_ops(body)
        steps = sum(1 for op in ops if op["op"] == "put") or 1
        token = token.strip()
        known = recent_keys.get(token)
        if known is not None and external_fast.eligible(ops):
            # The common step of a key read a moment ago: one statement, which checks the key
            # again (revoked or expired: the general path below refuses it).
            principal = Principal.for_api_key(known, known.tenant)
            if not principal.can("write"):
                raise Refused(403, "permission_denied", "This API key lacks the 'write' scope.")
            if not counted:
                throttling.count_call(principal, LANGGRAPH, steps)
            counted = True
            saved = external_fast.step(
                tenant_id=known.tenant_id,
                key_hash=known.key_hash,
                driver=external.driver_of(principal),
                ops=ops,
                after=after,
            )
            if saved is not None:
                return 200, {"saved": saved}, {}
        with transaction_scope():
            ahead = external.RunsAhead(ops)
            try:
                # Pipelined: the tenant setting, the key's lookup and the batch's runs (found
                # and locked only for a good key) in one round trip. A key this process knows
                # from a moment ago is not read again when the runs' statements prove it
                # good; otherwise (a thread's first step, a key revoked since) it is.
                connection.ensure_connection()
                with connection.wrap_database_errors, connection.connection.pipeline():
                    if known is None:
                        key = api_key_resolve(token, along=ahead.send)
                    else:
                        scope.activate(tenant_id=known.tenant_id)
                        ahead.send(known.tenant_id, known.key_hash)
                if known is not None and ahead.prove_key():
                    key = known
                elif known is not None:  # revoked or expired since: refused here
                    key, ahead = api_key_resolve(token), None
                recent_keys.keep(token, key)
            except KeyRefused as exc:
                recent_keys.forget(token)
                raise Refused(401, "unauthenticated", str(exc)) from None
            principal = Principal.for_api_key(key, key.tenant)
            if not principal.can("write"):
                raise Refused(403, "permission_denied", "This API key lacks the 'write' scope.")
            if not counted:
                throttling.count_call(principal, LANGGRAPH, steps)
            acting = principal
            saved = external.external_steps(principal=principal, ops=ops, ahead=ahead)
        return 200, {"saved": saved}, {}
    except ThreadDrivenElsewhere as exc:  # the batch rolled back; the attempt is kept
        _audit_refusal(acting, ops, exc)
        return exc.status, exc.as_dict(), {}
    except Exception as exc:
        return refused(exc)


def refused(exc: Exception) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The API's answer to a refusal or an outage raised while answering (re-raised: a bug)."""
    if isinstance(exc, throttling.RateLimited):
        body_ = {"code": "rate_limited", "message": str(exc.detail)}
        return 429, body_, {"Retry-After": str(max(1, math.ceil(exc.wait)))}
    if isinstance(exc, Refused):
        headers = {"WWW-Authenticate": 'Bearer realm="api"'} if exc.status == 401 else {}
        return exc.status, {"code": exc.code, "message": exc.message}, headers
    if isinstance(exc, AppError):  # BadInput, PayloadTooLarge, the services' refusals
        return exc.status, exc.as_dict(), {}
    if outage.is_outage(exc):
        return 503, {"code": "unavailable", "message": outage.MESSAGE}, {"Retry-After": "1"}
    raise exc


class _RecentKeys:
    """API keys this process resolved in the last KEY_REUSE_SECONDS, by token (at most
    KEYS_KEPT). Only the LangGraph doors (steps, and the one-checkpoint read in
    langgraph_reads.py) reuse one, and only in statements that prove the key active, unexpired
    and an integration's again (external.RunsAhead, the step and read functions): a revoked
    key is refused at its next call. A key's scopes never change; its tenant's settings (rate
    overrides) are read again when it is."""

    KEY_REUSE_SECONDS = 10.0
    KEYS_KEPT = 1024

    def __init__(self) -> None:
        self._keys: dict[str, tuple[ApiKey, float]] = {}

    def get(self, token: str) -> ApiKey | None:
        found = self._keys.get(token)
        if found is None or time.monotonic() - found[1] > self.KEY_REUSE_SECONDS:
            return None
        return found[0]

    def keep(self, token: str, key: ApiKey) -> None:
        if token in self._keys and self._keys[token][0] is key:
            return  # reused: its time is when it was read
        if len(self._keys) >= self.KEYS_KEPT:
            self._keys.clear()
        self._keys[token] = (key, time.monotonic())

    def forget(self, token: str) -> None:
        self._keys.pop(token, None)


recent_keys = _RecentKeys()


def _audit_refusal(principal: Principal, ops: list[dict[str, Any]], exc: AppError) -> None:
    """A batch that writes a thread another key drives: kept in the audit log (the door's
    REST endpoints do the same, agents/web/langgraph_api.py), in a transaction of its own."""
    with transaction_scope():
        scope.activate(tenant_id=principal.tenant.pk)
        for thread_id in sorted({op["thread_id"] for op in ops}):
            audit_record(
                tenant=principal.tenant,
                actor=principal,
                action="langgraph.write_refused",
                target_type="langgraph.thread",
                target_id=thread_id[:100],
                after={"verb": "steps", "thread_id": thread_id, "code": exc.code},
            )


def _too_large() -> PayloadTooLarge:
    limit = max_bytes()
    return PayloadTooLarge(
        f"The request body is larger than {limit} bytes (LANGGRAPH_MAX_REQUEST_BYTES).",
        detail={"limit": limit},
    )


# --- the ASGI door -------------------------------------------------------------------------------


async def application(scope: dict, receive: Any, send: Any) -> None:
    """The path served straight from ASGI: read the body (refused past the limit), answer in
    one thread call, hand the connection back to the pool."""
    if scope["method"] != "POST":
        await send_json(send, 405, {"code": "method_not_allowed", "message": "Use POST."}, {})
        return
    headers = dict(scope.get("headers") or [])
    limit = max_bytes()
    try:
        declared = int(headers.get(b"content-length", b"0") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        status, body, extra = 413, _too_large().as_dict(), {"Connection": "close"}
        await send_json(send, status, body, extra)
        return
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            await send_json(send, 413, _too_large().as_dict(), {"Connection": "close"})
            return
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    authorization = headers.get(b"authorization", b"").decode("latin-1")
    after: list[Callable[[], None]] = []
    body = b"".join(chunks)
    saved, counted = await on_loop(authorization, body, after)
    if saved is not None:
        await send_json(send, 200, {"saved": saved}, {})
        _send_events(after)  # queued for the live sender's thread: no wait here
        return
    loop = asyncio.get_running_loop()
    status, body_, extra = await loop.run_in_executor(
        executor(),
        in_thread,
        partial(answer, authorization, body, after=after, counted=counted),
        f"POST {PATH}",
    )
    await send_json(send, status, body_, extra)
    if after:  # the step's live events, off the graph's path
        loop.run_in_executor(executor(), _send_events, after)


async def on_loop(
    authorization: str, body: bytes, after: list[Callable[[], None]]
) -> tuple[list[dict[str, Any]] | None, bool]:
    """The common step on the event loop itself: a key this process read a moment ago, a
    batch the step function takes, its steps counted from the units this process reserved in
    the rate bucket, the statement on one of the loop's own connections. A thread hop costs
    about as much as the statement's own work, so the graph's every step skips it. Anything
    else (and any database error) is left to `answer` on the door's threads, which says why:
    (saved or None, whether the steps were counted)."""
    scheme, _, token = authorization.partition(" ")
    known = recent_keys.get(token.strip()) if scheme.lower() == "bearer" else None
    if known is None or len(body) > max_bytes():
        return None, False
    try:
        ops = parse_ops(body)
    except AppError:
        return None, False
    principal = Principal.for_api_key(known, known.tenant)
    if not principal.can("write") or not external_fast.eligible(ops):
        return None, False
    steps = sum(1 for op in ops if op["op"] == "put") or 1
    if not throttling.count_reserved(principal, LANGGRAPH, steps):
        return None, False
    conn = await loop_connections.take()
    if conn is None:
        return None, True
    try:
        saved = await external_fast.astep(
            conn,
            tenant_id=known.tenant_id,
            key_hash=known.key_hash,
            driver=external.driver_of(principal),
            ops=ops,
            after=after,
        )
    except Exception as exc:  # noqa: BLE001
        # A connection lost (a restart, a failover) or a statement refused: the threads'
        # path answers (503 for an outage), and this connection is not used again.
        log = logger.info if isinstance(exc, psycopg.Error) else logger.exception
        log("the loop's step statement failed; the general path answers", exc_info=True)
        await loop_connections.drop(conn)
        return None, True
    loop_connections.give(conn)
    return saved, True


class _LoopConnections:
    """The event loop's own database connections for the door's common step (autocommit,
    the same settings as Django's), at most LANGGRAPH_STEP_THREADS, each replaced after
    MAX_AGE seconds. None when all are busy or one cannot be opened: the threads' path takes
    the request."""

    MAX_AGE = 1800.0

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._free: list[tuple[psycopg.AsyncConnection, float]] = []
        self._born: dict[int, float] = {}  # id(connection): when it was opened

    async def take(self) -> psycopg.AsyncConnection | None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new loop (a test's): the old one's are not usable
            self._loop, self._free, self._born = loop, [], {}
        while self._free:
            conn, born = self._free.pop()
            if not conn.closed and time.monotonic() - born < self.MAX_AGE:
                return conn
            await self.drop(conn)
        if len(self._born) >= settings.LANGGRAPH_STEP_THREADS:
            return None
        params = connection.get_connection_params()
        params.pop("cursor_factory", None)
        try:
            conn = await psycopg.AsyncConnection.connect(**params, autocommit=True)
        except psycopg.Error:
            logger.warning("the loop's connection could not be opened", exc_info=True)
            return None
        self._born[id(conn)] = time.monotonic()
        return conn

    def give(self, conn: psycopg.AsyncConnection) -> None:
        self._free.append((conn, self._born.get(id(conn), 0.0)))

    async def drop(self, conn: psycopg.AsyncConnection) -> None:
        self._born.pop(id(conn), None)
        with contextlib.suppress(psycopg.Error):
            await conn.close()

    def close_all(self) -> None:
        """Close the idle connections without their loop (one that has ended)."""
        for conn, _ in self._free:
            conn.pgconn.finish()
        self._loop, self._free, self._born = None, [], {}


loop_connections = _LoopConnections()


def _send_events(after: list[Callable[[], None]]) -> None:
    for send_one in after:
        try:
            send_one()
        except Exception:  # noqa: BLE001 - a live update lost is logged, the step is saved
            logger.exception("sending a step's live event failed")


_threads: list[ThreadPoolExecutor] = []


def executor() -> ThreadPoolExecutor:
    # Threads of this door's own, each keeping its database connection from one request to
    # the next (a connection drawn from the pool per request costs a round trip to check it):
    # at most LANGGRAPH_STEP_THREADS of the pool's connections stay with them.
    if not _threads:
        _threads.append(
            ThreadPoolExecutor(
                max_workers=settings.LANGGRAPH_STEP_THREADS, thread_name_prefix="langgraph-steps"
            )
        )
    return _threads[0]


def in_thread(
    work: Callable[[], tuple[int, dict[str, Any], dict[str, str]]], what: str
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Run a lean door's `work` on its thread: a bug is a logged 500 with the API's body,
    never a hang; a connection left in a transaction or broken is closed."""
    try:
        return work()
    except Exception:  # noqa: BLE001
        logger.exception("%s failed", what)
        return 500, {"code": "server_error", "message": "The server failed."}, {}
    finally:
        # A connection that failed goes (the next request opens another); a good one stays.
        for conn in connections.all(initialized_only=True):
            broken = conn.errors_occurred and not conn.is_usable()
            if conn.connection is not None and (conn.in_atomic_block or broken):
                conn.close()


async def send_json(
    send: Any, status: int, body: dict[str, Any] | str, headers: dict[str, str]
) -> None:
    """The answer: `body` as JSON (a str is JSON text already)."""
    raw = (body if isinstance(body, str) else json.dumps(body)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *JSON_HEADERS,
                (b"content-length", str(len(raw)).encode()),
                *[(k.lower().encode(), v.encode()) for k, v in headers.items()],
            ],
        }
    )
    await send({"type": "http.response.body", "body": raw})


@csrf_exempt
def steps_view(request: HttpRequest) -> HttpResponse:
    """The same answer through Django (the test client, servers not started by config/asgi)."""
    if request.method != "POST":
        return _django(405, {"code": "method_not_allowed", "message": "Use POST."}, {})
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > max_bytes():
        return _django(413, _too_large().as_dict(), {})
    status, body, headers = answer(request.headers.get("Authorization", ""), request.read())
    return _django(status, body, headers)


def _django(status: int, body: dict[str, Any], headers: dict[str, str]) -> HttpResponse:
    response = HttpResponse(json.dumps(body), status=status, content_type="application/json")
    for name, value in headers.items():
        response[name] = value
    return response


# --- the validator -------------------------------------------------------------------------------

_PUT = {
    # name: (required, max length) of text fields
    "thread_id": (True, 200),
    "checkpoint_ns": (False, 200),
    "checkpoint_id": (True, 100),
    "parent_checkpoint_id": (False, 100),
    "type": (True, 50),
    "step": (False, 100),
}
_WRITES = {
    "thread_id": (True, 200),
    "checkpoint_ns": (False, 200),
    "checkpoint_id": (True, 100),
    "task_id": (True, 200),
    "task_path": (False, 500),
}
_BLOB = {"channel": (True, 200), "version": (True, 100), "type": (True, 50)}
_WRITE = {"channel": (True, 200), "type": (True, 50)}


def parse_ops(body: bytes) -> list[dict[str, Any]]:
    """The batch, checked and decoded (base64 to bytes); BadInput naming the field."""
    data = json_input.loads(body)
    if not isinstance(data, dict) or not isinstance(data.get("ops"), list):
        raise BadInput('A JSON object {"ops": [...]} of checkpoints and writes.')
    ops = data["ops"]
    if not 1 <= len(ops) <= MAX_OPS:
        _invalid("ops", f"Between 1 and {MAX_OPS} operations.")
    return [_op(op, f"ops[{i}]") for i, op in enumerate(ops)]


def _op(op: Any, where: str) -> dict[str, Any]:
    if not isinstance(op, dict) or op.get("op") not in ("put", "writes"):
        _invalid(f"{where}.op", 'One of "put", "writes".')
    if op["op"] == "put":
        found: dict[str, Any] = {"op": "put", **_texts(op, _PUT, where)}
        found["blob"] = _bytes(op.get("blob"), f"{where}.blob", blank=False)
        for name in ("metadata", "channel_versions", "preview"):
            value = op.get(name, {})
            if not isinstance(value, dict):
                _invalid(f"{where}.{name}", "A JSON object.")
            found[name] = value
        found["blobs"] = [
            {
                **_texts(b, _BLOB, f"{where}.blobs[{j}]"),
                "blob": _bytes(b.get("blob", ""), f"{where}.blobs[{j}].blob"),
            }
            for j, b in enumerate(_list(op.get("blobs", []), f"{where}.blobs"))
        ]
        # The nodes LangGraph runs next (agents/runtime/graph_runs.py); older clients omit it.
        found["next"] = _texts_list(op, "next", where, longest=200, most=1000)
        return found
    found = {"op": "writes", **_texts(op, _WRITES, where)}
    writes = []
    for j, w in enumerate(_list(op.get("writes"), f"{where}.writes")):
        idx = w.get("idx")
        if isinstance(idx, bool) or not isinstance(idx, int) or not -1000 <= idx <= 1_000_000:
            _invalid(f"{where}.writes[{j}].idx", "An integer from -1000 to 1000000.")
        writes.append(
            {
                "idx": idx,
                **_texts(w, _WRITE, f"{where}.writes[{j}]"),
                "blob": _bytes(w.get("blob", ""), f"{where}.writes[{j}].blob"),
            }
        )
    found["writes"] = writes
    interrupts = []
    for j, it in enumerate(_list(op.get("interrupts", []), f"{where}.interrupts")):
        interrupts.append(
            {
                **_texts(it, {"id": (True, 200)}, f"{where}.interrupts[{j}]"),
                "value": it.get("value"),
            }
        )
    found["interrupts"] = interrupts
    # A resume value the graph was given (the interrupt ids it answers), an error it raised.
    found["resumed"] = _texts_list(op, "resumed", where, longest=200, most=1000)
    found["errors"] = _texts_list(op, "errors", where, longest=2000, most=100)
    return found


def _texts_list(given: dict, name: str, where: str, *, longest: int, most: int) -> list[str] | None:
    value = given.get(name)
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) > most
        or not all(isinstance(v, str) and len(v) <= longest for v in value)
    ):
        _invalid(f"{where}.{name}", f"A list of at most {most} texts of {longest} characters.")
    return value


def _texts(given: dict, spec: dict[str, tuple[bool, int]], where: str) -> dict[str, str]:
    found = {}
    for name, (required, longest) in spec.items():
        value = given.get(name, "")
        if not isinstance(value, str) or len(value) > longest or (required and not value):
            need = "Required text" if required else "Text"
            _invalid(f"{where}.{name}", f"{need} of at most {longest} characters.")
        found[name] = value
    return found


def _list(value: Any, where: str) -> list[dict]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        _invalid(where, "A list of JSON objects.")
    return value


def _bytes(value: Any, where: str, *, blank: bool = True) -> bytes:
    if not isinstance(value, str) or (not blank and not value):
        _invalid(where, "Base64 text." if blank else "Required base64 text.")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        _invalid(where, "Not base64.")
        raise  # unreachable: _invalid raises


class Invalid(BadInput):
    code = "invalid"  # as the serializers' field errors elsewhere in the API


def _invalid(field: str, message: str) -> Any:
    raise Invalid(f"{field}: {message}", fields={field: [message]})
