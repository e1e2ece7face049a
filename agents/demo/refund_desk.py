"""The demo agent: a refund desk that looks up billing, asks a manager above a threshold,
refunds exactly once through a payment provider, and replies."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from decimal import Decimal

from django.conf import settings

from agents.demo.payments import auth_header
from agents.runtime.definitions import Agent, finish, goto, register, wait_for_approval
from agents.runtime.engine.step_context import StepContext
from agents.runtime.errors import ToolFailed, ToolUnavailable
from agents.runtime.tools import tool

BILLING = {
    # Deterministic history: every customer was charged twice for A-1001.
    "orders": [
        {"order": "A-1001", "amount": "400.00", "charges": 2, "item": "Standing desk"},
        {"order": "A-1002", "amount": "40.00", "charges": 1, "item": "Desk lamp"},
    ]
}


@tool(
    "billing_history",
    description="The customer's orders and how often each was charged.",
    parameters={
        "type": "object",
        "properties": {"customer": {"type": "string"}},
        "required": ["customer"],
    },
)
def billing_history(*, customer: str) -> dict:
    return {"customer": customer, **BILLING}


REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"type": "string", "minLength": 1},
        "order": {"type": "string", "pattern": "^A-[0-9]{4}$"},
        "amount": {"type": "string", "pattern": "^[0-9]+\\.[0-9]{2}$"},
    },
    "required": ["customer", "order", "amount"],
    "additionalProperties": False,
}


@tool(
    "issue_refund",
    side_effects=True,
    parameters=REFUND_SCHEMA,
    description="Refund money to the customer through the payment provider.",
)
def issue_refund(*, customer: str, order: str, amount: str, idempotency_key: str) -> dict:
    body = json.dumps(
        {"customer": customer, "order": order, "amount_cents": int(Decimal(amount) * 100)}
    ).encode()
    request = urllib.request.Request(
        settings.DEMO_PAYMENTS_URL,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key,
            **auth_header(),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code >= 500 or exc.code == 429:
            raise ToolUnavailable(f"payment provider answered {exc.code}") from exc
        raise ToolFailed(f"payment provider refused the refund ({exc.code})") from exc
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise ToolUnavailable(f"payment provider unreachable: {exc}") from exc


refund_desk = Agent(
    name="refund_desk",
    version=1,
    first="lookup",
    description="Customer service: checks billing, refunds duplicate charges, asks a manager "
    "above the approval threshold.",
)

_DECISION = re.compile(r"Refund (?P<amount>[0-9]+\.[0-9]{2}) \w+ for order (?P<order>A-[0-9]{4})")
_REMEMBERED_CHANNEL = re.compile(r"contacted by (?P<channel>\w+)")


@refund_desk.step
def lookup(ctx: StepContext):
    customer = ctx.run_input.get("customer") or "customer"
    history = ctx.tools.call("billing_history", customer=customer)
    # What the customer says about themselves ("contact me by email") is remembered with the
    # step: by the model's memory tools, or offline by patterns (memory/extraction.py).
    ctx.memory.extract(ctx.run_input.get("message", ""))
    return goto("decide", customer=customer, history=history)


@refund_desk.step
def decide(ctx: StepContext):
    request = ctx.run_input.get("message", "")
    # The packer sends the system prompt and this request, then what fits of the summary, the
    # conversation and the remembered facts (quoted data in a message of their own, never
    # part of the instructions), and records what it chose with the step.
    packed = ctx.pack(
        system="You are a refund desk. Decide refunds.",
        current=request,
        memories=ctx.memory.recall(request),
    )
    reply = ctx.llm.chat(packed.messages)
    match = _DECISION.search(reply.content)
    if match is None:
        ctx.say(reply.content)
        return finish({"refunded": False, "reason": "no refund requested"})
    order, amount = match["order"], match["amount"]
    known = {o["order"]: o for o in ctx.state["history"]["orders"]}
    if order not in known or Decimal(amount) > Decimal(known[order]["amount"]):
        ctx.say(f"I can't refund {amount} for {order}: it doesn't match your billing history.")
        return finish({"refunded": False, "reason": "does not match billing"})
    refund = {"customer": ctx.state["customer"], "order": order, "amount": amount}
    if Decimal(amount) > Decimal(str(settings.DEMO_REFUND_APPROVAL_THRESHOLD)):
        return wait_for_approval(
            action="issue_refund",
            arguments=refund,
            then="refund",
            reason=reply.content,
            amount=float(amount),
            refund=refund,
        )
    return goto("refund", refund=refund)


@refund_desk.step
def refund(ctx: StepContext):
    arguments = ctx.state["refund"]
    if ctx.decision is not None:
        if not ctx.decision["approved"]:
            ctx.say(
                "A manager reviewed your refund and declined it. "
                f"{ctx.decision.get('comment') or ''}".strip()
            )
            return finish({"refunded": False, "reason": "rejected by a manager"})
        arguments = ctx.decision["arguments"]
    receipt = ctx.tools.call("issue_refund", **arguments)
    return goto("reply", refund=arguments, receipt=receipt)


@refund_desk.step
def reply(ctx: StepContext):
    refund = ctx.state["refund"]
    ctx.say(
        f"Done: {refund['amount']} refunded for order {refund['order']} "
        f"(refund {ctx.state['receipt']['refund_id']}).{_confirmation(ctx)}"
    )
    return finish({"refunded": True, **refund, "refund_id": ctx.state["receipt"]["refund_id"]})


def _confirmation(ctx: StepContext) -> str:
    """How the customer asked to be contacted, if the desk remembers it."""
    for fact in ctx.memory.recall("How does the customer prefer to be contacted?", 120).facts:
        known = _REMEMBERED_CHANNEL.search(fact.text)
        if fact.key == "contact.channel" and known:
            return f" We will send the confirmation by {known['channel']}, as you prefer."
    return ""


register(refund_desk)
