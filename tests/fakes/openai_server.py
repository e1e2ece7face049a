"""A small OpenAI-compatible HTTP server on loopback whose next answers the test chooses.

    with FakeOpenAIServer() as server:
        server.enqueue(rate_limited(retry_after="2"), ok("Hello"))
        model = OpenAIChatModel(server.base_url, "sk-test", "fake-model", timeout=1.0)
        ...
        assert len(server.requests) == 2

Each request takes the next queued behaviour (`ok`, `rate_limited`, `server_error`, `hang`,
`bad_request`); with the queue empty it answers with `default`. Every request is recorded.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

MODEL = "fake-model"


@dataclass(frozen=True)
class Behaviour:
    """How the server answers one request."""

    status: int = 200
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    error_type: str = ""
    delay_seconds: float = 0.0


def ok(
    content: str = "Hello from the fake server.", *, tool_calls: list | None = None
) -> Behaviour:
    """A 200 answer; tool calls are `{"id", "name", "arguments": dict}`."""
    return Behaviour(content=content, tool_calls=list(tool_calls or []))


def rate_limited(retry_after: str | None = "2") -> Behaviour:
    """A 429 with a Retry-After header (delta-seconds or an HTTP date) unless None."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Behaviour(status=429, headers=headers, error_type="rate_limit_error")


def server_error(status: int = 500, retry_after: str | None = None) -> Behaviour:
    """A 5xx error, optionally with Retry-After."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Behaviour(status=status, headers=headers, error_type="server_error")


def hang(seconds: float, content: str = "Sorry, I was slow.") -> Behaviour:
    """Wait `seconds` (longer than the client's timeout) before answering 200."""
    return Behaviour(content=content, delay_seconds=seconds)


def bad_request(message: str = "Invalid 'messages': expected an array.") -> Behaviour:
    """A 400 the client must not retry."""
    return Behaviour(status=400, content=message, error_type="invalid_request_error")


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: Any
    client_port: int = 0  # the connection it came on


class FakeOpenAIServer:
    """Serves `POST /v1/chat/completions` from a background thread on 127.0.0.1."""

    def __init__(self, default: Behaviour | None = None, *, keep_alive: bool = False) -> None:
        self.default = default or ok()
        # Off: one request per connection, so no idle keep-alive thread outlives a test. On: a
        # JSON answer leaves the connection open for the client's next request, as APIs do.
        self.keep_alive = keep_alive
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        assert self._httpd is not None, "the server is not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def enqueue(self, *behaviours: Behaviour) -> None:
        """Answer the next requests with these behaviours, in order."""
        with self._lock:
            self._queue.extend(behaviours)

    def start(self) -> Self:
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        httpd.daemon_threads = True
        # A hanging handler must not hold up stop(); it is woken by `_stopping` anyway.
        httpd.block_on_close = False
        self._httpd = httpd
        # A short poll keeps stop() quick; the default half second adds up across tests.
        self._thread = threading.Thread(
            target=httpd.serve_forever, args=(0.05,), name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _take(self) -> Behaviour:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default


def _handler_for(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output quiet

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"null")
            except json.JSONDecodeError:
                body = raw.decode(errors="replace")
            headers = {name.lower(): value for name, value in self.headers.items()}
            server._record(
                RecordedRequest("POST", self.path, headers, body, self.client_address[1])
            )
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._json(404, _error("Not found.", "invalid_request_error"))
            behaviour = server._take()
            if behaviour.delay_seconds and server._stopping.wait(behaviour.delay_seconds):
                return
            # The client may have given up already (a timeout test); nothing to tell it then.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._answer(behaviour, body if isinstance(body, dict) else {})

        def _answer(self, behaviour: Behaviour, body: dict[str, Any]) -> None:
            if behaviour.status >= 400:
                message = behaviour.content or f"Fake error {behaviour.status}."
                return self._json(
                    behaviour.status, _error(message, behaviour.error_type), behaviour.headers
                )
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return self._sse(_chunks(behaviour, body, include_usage))
            return self._json(200, _completion(behaviour, body))

        def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if not server.keep_alive:
                self.send_header("Connection", "close")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = not server.keep_alive

        def _sse(self, chunks: list[dict[str, Any]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")  # the body ends when the socket closes
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

    return Handler


def _error(message: str, error_type: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": None, "code": None}}


def _usage(body: dict[str, Any], content: str) -> dict[str, int]:
    prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages") or [])
    completion = len(content.split())
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _wire_calls(behaviour: Behaviour) -> list[dict[str, Any]]:
    return [
        {
            "id": call.get("id") or f"call_{index}",
            "type": "function",
            "function": {"name": call["name"], "arguments": json.dumps(call.get("arguments", {}))},
        }
        for index, call in enumerate(behaviour.tool_calls)
    ]


def _completion(behaviour: Behaviour, body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": behaviour.content or None}
    if behaviour.tool_calls:
        message["tool_calls"] = _wire_calls(behaviour)
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if behaviour.tool_calls else "stop",
            }
        ],
        "usage": _usage(body, behaviour.content),
    }


def _chunks(behaviour: Behaviour, body: dict[str, Any], include_usage: bool) -> list[dict]:
    model = body.get("model") or MODEL

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": word}) for word in re.findall(r"[^ ]+ *| +", behaviour.content)]
    for index, call in enumerate(_wire_calls(behaviour)):
        # Like the real API: id and name first, then the arguments in fragments.
        head = {"index": index, "id": call["id"], "type": "function"}
        head["function"] = {"name": call["function"]["name"], "arguments": ""}
        chunks.append(chunk({"tool_calls": [head]}))
        arguments = call["function"]["arguments"]
        middle = len(arguments) // 2
        for part in (arguments[:middle], arguments[middle:]):
            chunks.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            )
    chunks.append(chunk({}, "tool_calls" if behaviour.tool_calls else "stop"))
    if include_usage:
        last = {**chunks[-1], "choices": [], "usage": _usage(body, behaviour.content)}
        chunks.append(last)
    return chunks
