"""The SDK's REST client: sync calls through http.client encode and retry as the httpx path does."""

from __future__ import annotations

import pytest
from agentstate_client.client import AgentStateError, Client, _query


def test_query_parameters_are_encoded_as_httpx_encodes_them():
    assert _query({"limit": 1, "thread_id": "a b", "deep": True, "ns": None}) == (
        "limit=1&thread_id=a+b&deep=true&ns="
    )
    assert _query({"tag": ["x", "y"], "flag": False}) == "tag=x&tag=y&flag=false"


def test_a_sync_call_to_a_server_that_is_not_there_is_retried_then_unavailable():
    client = Client("http://127.0.0.1:9", "ak_x", retries=2, retry_budget=5)
    with pytest.raises(AgentStateError) as failed:
        client.get("runs")
    assert failed.value.code == "unavailable"
    assert client.requests_sent == 3  # the first try and two retries
    client.close()


def test_a_sync_call_reads_the_apis_error_body(console_url):
    with Client(console_url, "ak_00000000000000000000000000000000_nope") as client:
        with pytest.raises(AgentStateError) as refused:
            client.get("runs")
    assert (refused.value.status, refused.value.code) == (401, "unauthenticated")
    assert client.answers == {401: 1}


def test_a_kept_connection_the_server_closed_is_replaced_without_the_caller_seeing_it():
    # A server that answers one request per connection and then hangs up without saying so
    # (as a proxy or server closing idle keep-alive connections does).
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    served = []

    def serve() -> None:
        while len(served) < 3:
            conn, _ = listener.accept()
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(4096)
                served.append(request.split(b" ", 2)[1])
                body = b'{"ok": true}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with Client(f"http://127.0.0.1:{port}", "ak_x", retries=0) as client:
        answers = [client.get("runs", n=i) for i in range(3)]
    thread.join(5)
    listener.close()
    assert answers == [{"ok": True}] * 3
    assert served == [b"/api/v1/runs?n=0", b"/api/v1/runs?n=1", b"/api/v1/runs?n=2"]
    assert client.requests_sent == 3 and client.answers == {200: 3}
