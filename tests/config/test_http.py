"""Django's HTTP on a fixed pool of threads (config/http.py): a request is served whole by one
of the pool's threads, as under any WSGI server, and a body sent in chunks without a
Content-Length still reaches the view."""

from __future__ import annotations

import json
import threading

import pytest
from asgiref.testing import ApplicationCommunicator

from config import http
from tests import factories

pytestmark = pytest.mark.django_db(transaction=True)


async def call(app, *, method: str, path: str, headers: list, chunks: list[bytes]) -> tuple:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    talk = ApplicationCommunicator(app, scope)
    for i, chunk in enumerate(chunks):
        await talk.send_input(
            {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        )
    start = await talk.receive_output(10)
    body = b""
    while True:
        message = await talk.receive_output(10)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    return start["status"], dict(start["headers"]), body


@pytest.fixture
def app():
    app = http.application(2)
    yield app
    # Each pool thread closes its own database connection (the test database is dropped after).
    from django.db import connections

    both = threading.Barrier(2)

    def close() -> None:
        connections.close_all()
        both.wait(10)

    for done in [app.executor.submit(close) for _ in range(2)]:
        done.result(10)
    app.executor.shutdown(wait=True)


@pytest.mark.parametrize("sized", [True, False], ids=["with Content-Length", "chunked"])
def test_a_json_body_reaches_the_view_whether_sized_or_sent_in_chunks(
    app, tenant_a, sized, monkeypatch
):
    monkeypatch.setattr("agents.runtime.queue.enqueue_run", lambda **kwargs: None)  # no worker
    key = factories.make_api_key(tenant_a, scopes=["read", "write"])
    body = json.dumps({"agent": "refund_desk", "input": {"message": "hello"}}).encode()
    headers = [
        (b"authorization", f"Bearer {key.raw}".encode()),
        (b"content-type", b"application/json"),
    ]
    if sized:
        headers.append((b"content-length", str(len(body)).encode()))
    from asgiref.sync import async_to_sync

    status, _, answer = async_to_sync(call)(
        app, method="POST", path="/api/v1/runs", headers=headers, chunks=[body[:10], body[10:]]
    )
    assert status == 201, answer
    assert json.loads(answer)["agent"] == "refund_desk"


def test_requests_are_served_by_the_pools_threads_not_one_thread_each(app, tenant_a, monkeypatch):
    from asgiref.sync import async_to_sync

    from config import ops

    seen: set[str] = set()
    real = ops.OpsMiddleware.__call__

    def spy(self, request):
        seen.add(threading.current_thread().name)
        return real(self, request)

    monkeypatch.setattr(ops.OpsMiddleware, "__call__", spy)
    for _ in range(12):
        status, _, _ = async_to_sync(call)(
            app, method="GET", path="/healthz", headers=[], chunks=[b""]
        )
        assert status == 200
    assert 1 <= len(seen) <= 2 and all(name.startswith("WSGI") for name in seen)


@pytest.mark.parametrize("sized", [True, False], ids=["with Content-Length", "chunked"])
def test_a_body_past_the_limit_is_refused_with_the_standard_error_whether_sized_or_chunked(
    app, tenant_a, sized, settings
):
    from asgiref.sync import async_to_sync

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2048
    key = factories.make_api_key(tenant_a, scopes=["read", "write"])
    body = json.dumps({"agent": "refund_desk", "input": {"message": "x" * 5000}}).encode()
    headers = [
        (b"authorization", f"Bearer {key.raw}".encode()),
        (b"content-type", b"application/json"),
    ]
    if sized:
        headers.append((b"content-length", str(len(body)).encode()))
    chunks = [body[i : i + 1000] for i in range(0, len(body), 1000)]
    status, _, answer = async_to_sync(call)(
        app, method="POST", path="/api/v1/runs", headers=headers, chunks=chunks
    )
    assert 400 <= status < 500, answer
    assert "code" in json.loads(answer)


def test_a_whole_response_crosses_from_the_thread_to_the_event_loop_once(
    app, tenant_a, monkeypatch
):
    """A page or an API answer (not streamed) is handed back whole when the view is done: the
    thread does not wait on the event loop for the start, the body and the end in turn."""
    from a2wsgi.wsgi import WSGIResponder
    from asgiref.sync import async_to_sync

    crossings: list[dict] = []
    real = WSGIResponder.send

    def counted(self, message):
        crossings.append(message)
        return real(self, message)

    monkeypatch.setattr(WSGIResponder, "send", counted)
    key = factories.make_api_key(tenant_a, scopes=["read"])
    status, headers, body = async_to_sync(call)(
        app,
        method="GET",
        path="/api/v1/runs",
        headers=[(b"authorization", f"Bearer {key.raw}".encode())],
        chunks=[b""],
    )
    assert status == 200 and json.loads(body)["results"] == []
    assert headers[b"content-type"] == b"application/json"
    assert int(headers[b"content-length"]) == len(body)
    assert crossings == []


def test_a_streamed_response_is_still_sent_part_by_part(app, tenant_a, monkeypatch):
    from asgiref.sync import async_to_sync
    from django.http import StreamingHttpResponse
    from django.urls import path

    from config import urls

    sent: list[bytes] = []

    def parts(request):
        def chunks():
            for word in (b"one ", b"two ", b"three"):
                sent.append(word)
                yield word

        return StreamingHttpResponse(chunks(), content_type="text/plain")

    monkeypatch.setattr(urls, "urlpatterns", [path("streamed/", parts), *urls.urlpatterns])
    from django.urls import clear_url_caches

    clear_url_caches()
    try:
        status, headers, body = async_to_sync(call)(
            app, method="GET", path="/streamed/", headers=[], chunks=[b""]
        )
    finally:
        clear_url_caches()
    assert status == 200 and body == b"one two three"
    assert sent == [b"one ", b"two ", b"three"]
    assert b"content-length" not in headers


def test_an_error_answer_is_whole_too(app, tenant_a):
    from asgiref.sync import async_to_sync

    status, headers, body = async_to_sync(call)(
        app, method="GET", path="/api/v1/runs", headers=[], chunks=[b""]
    )
    assert status in (401, 403)
    assert json.loads(body)["code"]
