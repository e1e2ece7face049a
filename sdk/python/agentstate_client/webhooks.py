"""Check that a webhook came from AgentState: its `AgentState-Signature` header is
`t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<raw body>" with the endpoint's secret>`.

    from agentstate_client.webhooks import verify

    event = verify(secret, request.body, request.headers["AgentState-Signature"])
    if event["event"] == "langgraph.decision":
        graph.invoke(Command(resume=event["decision"]),
                     {"configurable": {"thread_id": event["thread_id"]}})

Deliveries come at least once: drop a repeat by `event["delivery_id"]`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any


class InvalidSignature(Exception):
    """The body was not signed with this secret, or too long ago."""


def verify(secret: str, body: bytes, header: str, *, tolerance: float = 300.0) -> dict[str, Any]:
    """The event in `body` if `header` signs it with `secret` within `tolerance` seconds."""
    parts = dict(p.split("=", 1) for p in (header or "").split(",") if "=" in p)
    try:
        stamp = int(parts["t"])
    except (KeyError, ValueError):
        raise InvalidSignature("no timestamp in the signature header") from None
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, parts.get("v1", "")):
        raise InvalidSignature("the signature does not match")
    if abs(time.time() - stamp) > tolerance:
        raise InvalidSignature("the signature is too old")
    return json.loads(body)
