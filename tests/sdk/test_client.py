"""The SDK's REST client: sync calls through urllib3 encode and retry as the httpx path does."""

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
