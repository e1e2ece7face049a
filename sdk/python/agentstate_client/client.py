"""The REST API with an API key: JSON in and out, errors as `AgentStateError` with the API's
stable code, an Idempotency-Key on every write so a retried request changes nothing twice.

Connections are kept alive (one pool per client, sync and async). Sync calls go through
urllib3, which costs a fraction of httpx's time per request (a graph pays it every step);
async calls and a given `transport` (tests pass httpx's MockTransport) go through httpx.
A request that meets a rate limit (429) waits as long as `Retry-After` says, and one that
cannot reach the server (connection refused or dropped, 503) is sent again after a short
growing pause, each at most `retries` times and `retry_budget` seconds in all; the same
Idempotency-Key rides along, and the saver's calls are idempotent by themselves (a checkpoint
by its id, a write by its checkpoint, task and index). Use it as a context manager, or
`close()` / `aclose()` it.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import random
import time
import uuid
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import urllib3

RETRY_STATUSES = (429, 502, 503, 504)


class AgentStateError(Exception):
    """An answer of the API that is not a success: its `code`, `status` and message."""

    def __init__(self, code: str, message: str, status: int, detail: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.detail = detail


class Client:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        async_transport: httpx.AsyncBaseTransport | None = None,
        retries: int = 8,
        retry_budget: float = 120.0,
    ) -> None:
        self._base = base_url.rstrip("/") + "/api/v1/"
        self._headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self._timeout = timeout
        self._async_transport = async_transport
        self.retries = retries
        self.retry_budget = retry_budget
        self.requests_sent = 0  # every attempt, retries included
        self.answers: dict[int, int] = {}  # how many answers of each status, retries included
        self._http = httpx.Client(
            base_url=self._base, headers=self._headers, timeout=timeout, transport=transport
        )
        self._pool: urllib3.HTTPConnectionPool | None = None
        if transport is None:
            self._pool = urllib3.connection_from_url(
                self._base, maxsize=8, timeout=urllib3.Timeout(connect=timeout, read=timeout)
            )
        self._path = urlsplit(self._base).path
        # An async client belongs to the event loop that first used it.
        self._ahttp: httpx.AsyncClient | None = None
        self._aloop: asyncio.AbstractEventLoop | None = None

    # --- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()
        if self._pool is not None:
            self._pool.close()
        if self._ahttp is not None and self._aloop is not None and not self._aloop.is_closed():
            if self._aloop.is_running():
                self._aloop.create_task(self._ahttp.aclose())
            else:
                self._aloop.run_until_complete(self._ahttp.aclose())
        self._ahttp = self._aloop = None

    async def aclose(self) -> None:
        if self._ahttp is not None and self._aloop is asyncio.get_running_loop():
            await self._ahttp.aclose()
            self._ahttp = self._aloop = None
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # --- sync -------------------------------------------------------------------------------

    def get(self, path: str, **params: Any) -> Any:
        return self._send("GET", path, params=params)

    def post(self, path: str, body: dict[str, Any], *, idempotency_key: bool = True) -> Any:
        """POST `body`; with a fresh Idempotency-Key unless the call is idempotent by itself."""
        return self._send("POST", path, content=_json(body), write=idempotency_key)

    def delete(self, path: str) -> Any:
        return self._send("DELETE", path, write=True)

    def _send(self, method: str, path: str, *, write: bool = False, **kwargs: Any) -> Any:
        headers = _headers(write, kwargs)
        started, attempt = time.monotonic(), 0
        while True:
            self.requests_sent += 1
            try:
                response = self._request(method, path, headers, **kwargs)
            except (httpx.TransportError, urllib3.exceptions.HTTPError) as exc:
                pause = self._pause(attempt, started, None)
                if pause is None:
                    raise AgentStateError("unavailable", str(exc), 0) from exc
            else:
                self.answers[response.status_code] = self.answers.get(response.status_code, 0) + 1
                pause = self._retry_after(response, attempt, started)
                if pause is None:
                    return _answer(response)
            time.sleep(pause)
            attempt += 1

    def _request(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        *,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
    ) -> httpx.Response | _Answer:
        if self._pool is None:
            return self._http.request(method, path, headers=headers, params=params, content=content)
        url = self._path + path + ("?" + _query(params) if params else "")
        raw = self._pool.urlopen(
            method, url, body=content, headers={**self._headers, **headers}, retries=False
        )
        return _Answer(raw.status, raw.headers, raw.data)

    # --- async ------------------------------------------------------------------------------

    async def aget(self, path: str, **params: Any) -> Any:
        return await self._asend("GET", path, params=params)

    async def apost(self, path: str, body: dict[str, Any], *, idempotency_key: bool = True) -> Any:
        return await self._asend("POST", path, content=_json(body), write=idempotency_key)

    async def adelete(self, path: str) -> Any:
        return await self._asend("DELETE", path, write=True)

    def _async_http(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._ahttp is None or self._aloop is not loop:
            self._ahttp = httpx.AsyncClient(
                base_url=self._base,
                headers=self._headers,
                timeout=self._timeout,
                transport=self._async_transport,
            )
            self._aloop = loop
        return self._ahttp

    async def _asend(self, method: str, path: str, *, write: bool = False, **kwargs: Any) -> Any:
        headers = _headers(write, kwargs)
        started, attempt = time.monotonic(), 0
        while True:
            self.requests_sent += 1
            try:
                response = await self._async_http().request(method, path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                pause = self._pause(attempt, started, None)
                if pause is None:
                    raise AgentStateError("unavailable", str(exc), 0) from exc
            else:
                self.answers[response.status_code] = self.answers.get(response.status_code, 0) + 1
                pause = self._retry_after(response, attempt, started)
                if pause is None:
                    return _answer(response)
            await asyncio.sleep(pause)
            attempt += 1

    # --- retries ----------------------------------------------------------------------------

    def _retry_after(
        self, response: httpx.Response | _Answer, attempt: int, started: float
    ) -> float | None:
        if response.status_code not in RETRY_STATUSES:
            return None
        asked = None
        with contextlib.suppress(ValueError):
            asked = float(response.headers.get("Retry-After", ""))
        return self._pause(attempt, started, asked)

    def _pause(self, attempt: int, started: float, asked: float | None) -> float | None:
        """Seconds to wait before the next attempt, or None when retries are spent."""
        if attempt >= self.retries:
            return None
        backoff = min(5.0, 0.05 * 2**attempt) * (0.5 + random.random() / 2)
        pause = max(asked or 0.0, backoff)
        if time.monotonic() - started + pause > self.retry_budget:
            return None
        return pause


def _json(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _headers(write: bool, kwargs: dict[str, Any]) -> dict[str, str]:
    # One key for every attempt: a retried write is recognised, not done twice.
    headers = {"Idempotency-Key": str(uuid.uuid4())} if write else {}
    if "content" in kwargs:
        headers["Content-Type"] = "application/json"
    return headers


class _Answer:
    """A urllib3 response, read, with the parts of httpx.Response the client uses."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status: int, headers: Any, content: bytes) -> None:
        self.status_code, self.headers, self.content = status, headers, content

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def reason_phrase(self) -> str:
        try:
            return http.HTTPStatus(self.status_code).phrase
        except ValueError:
            return ""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _query(params: dict[str, Any]) -> str:
    """Query parameters as httpx encodes them (lists repeated, booleans in lower case)."""
    pairs = []
    for name, value in params.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            pairs.append((name, _text(item)))
    return urlencode(pairs)


def _text(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return {None: "", True: "true", False: "false"}[value]
    return str(value)


def _answer(response: httpx.Response | _Answer) -> Any:
    if response.is_success and (response.status_code == 204 or not response.content):
        return None
    try:
        body = response.json()
    except ValueError:
        body = {"code": "unexpected_answer", "message": response.text[:200]}
    if not response.is_success:
        raise AgentStateError(
            str(body.get("code", "error")),
            str(body.get("message", response.reason_phrase)),
            response.status_code,
            body.get("detail"),
        )
    return body
