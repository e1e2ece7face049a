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


def application(threads: int) -> Any:
    """The ASGI app serving Django's HTTP on `threads` threads."""
    return WSGIMiddleware(_WholeBody(WSGIHandler()), workers=threads)
