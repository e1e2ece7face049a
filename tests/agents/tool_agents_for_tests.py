"""Tool-calling agents for the tests, with a deterministic model that speaks the OpenAI
tool-calling format. Loaded by in-process tests and by real workers (AGENTSTATE_AGENT_MODULES).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from agents.runtime import ToolAgent, register, tool
from agents.runtime.llm import ChatResult

payments: Counter = Counter()
lookups: Counter = Counter()

ORDERS = {"A-1001": {"order": "A-1001", "amount": "400.00"}, "A-1002": {"amount": "40.00"}}


@tool(
    "lookup_order",
    description="An order and what was charged.",
    parameters={
        "type": "object",
        "properties": {"order": {"type": "string"}},
        "required": ["order"],
        "additionalProperties": False,
    },
)
def lookup_order(*, order: str) -> dict:
    lookups[order] += 1
    return ORDERS.get(order, {"order": order, "error": "unknown order"})


@tool(
    "pay_refund",
    side_effects=True,
    description="Refund an amount for an order.",
    parameters={
        "type": "object",
        "properties": {
            "order": {"type": "string"},
            "amount": {"type": "string", "pattern": "^[0-9]+\\.[0-9]{2}$"},
        },
        "required": ["order", "amount"],
        "additionalProperties": False,
    },
)
def pay_refund(*, order: str, amount: str, idempotency_key: str) -> dict:
    payments[idempotency_key] += 1
    return {"refund_id": f"rf-{idempotency_key[-8:]}", "order": order, "amount": amount}


class DeskModel:
    """Looks up both orders at once, refunds what the customer asked, then answers. What it
    does next depends only on the messages, so a replayed step asks for the same calls."""

    model = "scripted-tools"

    def __init__(self, script: list[Any] | None = None) -> None:
        self.script = script

    def chat(self, messages, *, tools=None, on_token=None) -> ChatResult:
        turn = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        results = [json.loads(m["content"]) for m in messages if m.get("role") == "tool"]
        script = self.script or DESK_SCRIPT
        reply = script[min(turn, len(script) - 1)]
        if callable(reply):
            reply = reply(results)
        calls = [
            {"id": f"call_{turn}_{i}", "name": name, "arguments": arguments}
            for i, (name, arguments) in enumerate(reply.get("calls", []))
        ]
        content = reply.get("content", "")
        if on_token is not None and content:
            on_token(content)
        return ChatResult(content=content, tool_calls=calls, model=self.model)


def _refund_or_explain(results: list[dict]) -> dict:
    return {"content": "Refunding the duplicate charge.", "calls": [
        ("pay_refund", {"order": "A-1002", "amount": "40.00"})
    ]}  # fmt: skip


def _answer(results: list[dict]) -> dict:
    refund = results[-1]
    if "error" in refund:
        return {"content": f"I could not refund: {refund['error']}"}
    return {
        "content": f"Refunded {refund['amount']} for {refund['order']} ({refund['refund_id']})."
    }


DESK_SCRIPT: list[Any] = [
    {"content": "", "calls": [("lookup_order", {"order": "A-1001"}),
                              ("lookup_order", {"order": "A-1002"})]},
    _refund_or_explain,
    _answer,
]  # fmt: skip

desk = register(
    ToolAgent(
        name="tool_desk",
        instructions="You are a refund desk. Look up the orders, refund duplicates, then answer.",
        tools=["lookup_order", "pay_refund"],
        max_turns=5,
        model=DeskModel,
    )
)

careful_desk = register(
    ToolAgent(
        name="tool_desk_approved",
        instructions="You are a refund desk whose refunds a manager approves.",
        tools=["lookup_order", "pay_refund"],
        approval_required=["pay_refund"],
        model=DeskModel,
    )
)


# The demo's tools (billing, a payment provider that deduplicates on Idempotency-Key), driven
# by a tool-calling model: what the durability tests run on real workers.
import agents.demo.refund_desk  # noqa: E402, F401  (registers billing_history, issue_refund)

DEMO_SCRIPT: list[Any] = [
    {"calls": [("billing_history", {"customer": "carol"})]},
    {"content": "The duplicate charge is A-1002.",
     "calls": [("issue_refund", {"customer": "carol", "order": "A-1002", "amount": "40.00"})]},
    lambda results: {"content": f"Done: refund {results[-1].get('refund_id')}."},
]  # fmt: skip

demo_desk = register(
    ToolAgent(
        name="tool_refund_desk",
        instructions="You are a refund desk. Check billing, refund duplicate charges, answer.",
        tools=["billing_history", "issue_refund"],
        model=lambda: DeskModel(DEMO_SCRIPT),
    )
)
