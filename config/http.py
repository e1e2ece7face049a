"""Django's HTTP requests served on a fixed pool of threads (a2wsgi over Django's WSGI handler).

Our views and middleware are synchronous (each request is one database transaction, opened by
tenants.middleware.TenantMiddleware around the view). Under Django's ASGI handler every
request got a thread of its own (asgiref's ThreadSensitiveContext: a new executor thread per
request), crossed from that thread back to the event loop and out again to reach the view (the
sync middleware chain ends in an async handler), and drew its database wrapper afresh in the
new thread: 2-11 ms of a web process's CPU per request measured over HTTP (bench/load.py,
/console/ 29.8 -> 18.5 ms, the API run list 12.3 -> 8.2 ms). Here the whole request runs in one
of WEB_THREADS long-lived threads, as a WSGI server runs it; uvicorn keeps the connections, the
websockets (Channels) and the lean paths of config/asgi.py. WEB_THREADS=0 serves Django's HTTP
through its ASGI handler instead.
"""

from __future__ import annotations

import io
from typing import Any

from a2wsgi import WSGIMiddleware
from a2wsgi.wsgi import WSGIResponder
from django.conf import settings
from django.core.handlers.wsgi import WSGIHandler


class _WholeBody:
    """A body sent without Content-Length (chunked) is read whole, up to one byte past the
    largest body Django accepts (which then refuses it with a 400), and given its length:
    Django's WSGI request reads only Content-Length bytes (none without it)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if "CONTENT_LENGTH" not in environ and environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
            most = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            body = environ["wsgi.input"].read(-1 if most is None else most + 1)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return self.app(environ, start_response)


class _WholeResponder(WSGIResponder):
    """a2wsgi's responder, but a response that is not streamed (a page, an API answer: Django
    says so with `response.streaming`) is handed back to the event loop whole, once, when the
    view is done. a2wsgi's thread waits on the event loop for the start, every part of the body
    and the end in turn (three hand-offs and their wake-ups a request); a streamed response
    (an export, a file) still goes out part by part that way."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.whole: tuple[int, list[tuple[bytes, bytes]], bytes] | None = None
        self._started: tuple[str, list[tuple[str, str]]] | None = None

    async def sender(self, send: Any) -> None:
        await super().sender(send)
        if self.whole is not None and self.exc_info is None:
            status, headers, body = self.whole
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})

    def wsgi(self, environ: dict[str, Any], start_response: Any) -> None:
        iterable = self.app(environ, self._hold_start)
        if getattr(iterable, "streaming", True) or self._started is None:
            self._release_start()
            try:
                for chunk in iterable:
                    self.send({"type": "http.response.body", "body": chunk, "more_body": True})
                self.send({"type": "http.response.body", "body": b""})
            finally:
                getattr(iterable, "close", lambda: None)()
            return
        try:
            body = b"".join(iterable)
        finally:
            iterable.close()
        status, headers = self._started
        self.whole = (int(status.split(" ", 1)[0]), _encoded(headers), body)

    def _hold_start(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None):
        """start_response, kept until the response is known to be whole or streamed."""
        self.exc_info = exc_info
        self._started = (status, headers)
        return self._write

    def _write(self, chunk: bytes) -> None:  # WSGI's legacy write(): stream from here on
        self._release_start()
        self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    def _release_start(self) -> None:
        if self._started is not None and not self.response_started:
            status, headers = self._started
            self.start_response(status, headers, self.exc_info)


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [
        (name.strip().encode("latin1").lower(), value.strip().encode("latin1"))
        for name, value in headers
    ]


class _WholeResponses(WSGIMiddleware):
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            responder = _WholeResponder(self.app, self.executor, self.send_queue_size)
            return await responder(scope, receive, send)
        return await super().__call__(scope, receive, send)


def application(threads: int) -> Any:
    """The ASGI app serving Django's HTTP on `threads` threads."""
    return _WholeResponses(_WholeBody(WSGIHandler()), workers=threads)
