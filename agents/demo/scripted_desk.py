"""The scripted model's part in the demo: the refund desk's model, offline and deterministic.

`SCRIPT` (the default LLM_SCRIPT) plays the model of agents/demo/refund_desk.py in the OpenAI
tool-calling format; what it does next depends only on the conversation, so a replayed step
asks for the same calls. It reads a request as refund_request.read() does (amounts and orders
as people write them):

    a refund request with order and amount -> billing_history(customer)
    ... lacking the order or the amount    -> a reply that says which, with an example
    the billing history                    -> issue_refund(customer, order, amount) when the
                                              order and amount match it, else a reply saying
                                              they do not
    the refund's receipt                   -> "Done: ..." (by the remembered contact channel)
    a declined or failed refund            -> a reply saying it was declined, and by whom
    anything else                          -> DEFAULT: what the desk can do, with examples
"""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal
from typing import Any

from agents.demo import refund_request
from agents.runtime.llm import Rule, Script, last_user, message_text
from core import json_input

EXAMPLE = "I was charged twice for order A-1002, please refund 40.00"
DEFAULT = (
    "Hello, this is the refund desk. I can refund a duplicate charge: tell me the order "
    f'number and the amount, for example "{EXAMPLE}". Tell me how you like to be contacted '
    '("email me at ...", "text me", "I prefer WhatsApp") and I will remember it.'
)
_INPUT_DATA = "Run input (data): "
# A remembered fact, as the memory section quotes it (JSON strings in a system message).
_REMEMBERED_CHANNEL = re.compile(r'"Prefers to be contacted by (?P<channel>[A-Za-z-]+)"')
_DECLINED_BY_A_PERSON = re.compile(r"declined", re.I)


def _asks_for_refund(messages: list[dict[str, Any]]) -> bool:
    """The conversation's current request asks for a refund (complete or not)."""
    return refund_request.read(last_user(messages)).asks_refund


def _refund_desk(messages: list[dict[str, Any]]) -> dict[str, Any] | str:
    request = refund_request.read(last_user(messages))
    if not request.complete:
        return _what_is_missing(request)
    last = messages[-1] if messages else {}
    if last.get("role") != "tool":
        customer = _run_input(messages).get("customer") or "customer"
        return {
            "content": "",
            "tool_calls": [_call(messages, "billing_history", {"customer": str(customer)})],
            # Asked without tools (a plain chat call): the decision in words, as before.
            "without_tools": _decision(request),
        }
    call = _answered_call(messages, last)
    result = _json(last.get("content"))
    if call["name"] == "billing_history":
        return _decide(messages, request, result)
    if call["name"] == "issue_refund":
        return {"content": _confirm(messages, call["arguments"], result)}
    return {"content": "Something went wrong on my side; a person will follow up."}


def _what_is_missing(request: refund_request.RefundRequest) -> str:
    seen = []
    if request.order:
        seen.append(f"order {request.order}")
    if request.amount is not None:
        seen.append(f"the amount {request.amount}")
    got = f"I see {' and '.join(seen)}, but I" if seen else "I"
    return (
        f'{got} need {" and ".join(request.missing)} to look at a refund. For example: "{EXAMPLE}".'
    )


def _decision(request: refund_request.RefundRequest) -> str:
    return f"Refund {request.amount} USD for order {request.order}: {request.reason}."


def _decide(
    messages: list[dict[str, Any]], request: refund_request.RefundRequest, billing: Any
) -> dict[str, Any]:
    amount, order = request.amount, request.order
    orders = billing.get("orders") if isinstance(billing, dict) else None
    known = {str(o.get("order")): o for o in orders or [] if isinstance(o, dict)}
    try:
        matches = (
            amount is not None
            and order in known
            and amount <= Decimal(str(known[order].get("amount")))
        )
    except ArithmeticError:
        matches = False
    if not matches:
        return {
            "content": f"I can't refund {amount} for {order}: it doesn't match your billing "
            "history."
        }
    customer = billing.get("customer") or _run_input(messages).get("customer") or "customer"
    arguments = {"customer": str(customer), "order": order, "amount": str(amount)}
    return {
        "content": _decision(request),
        "tool_calls": [_call(messages, "issue_refund", arguments)],
    }


def _confirm(messages: list[dict[str, Any]], arguments: Any, receipt: Any) -> str:
    asked = arguments if isinstance(arguments, dict) else {}
    if not isinstance(receipt, dict) or "error" in receipt or not receipt.get("refund_id"):
        problem = receipt.get("error", "") if isinstance(receipt, dict) else ""
        if isinstance(receipt, dict) and _DECLINED_BY_A_PERSON.search(str(problem)):
            comment = str(receipt.get("comment") or "")
            return f"A manager reviewed your refund and declined it. {comment}".strip()
        return f"Your refund was declined: {problem or 'the payment provider did not confirm it'}."
    # The receipt says what really ran (a manager may have edited the arguments).
    amount = receipt.get("amount") or asked.get("amount")
    order = receipt.get("order") or asked.get("order")
    done = f"Done: {amount} refunded for order {order} (refund {receipt['refund_id']})."
    channel = _remembered_channel(messages)
    if channel:
        done += f" We will send the confirmation by {channel}, as you prefer."
    return done


def _remembered_channel(messages: list[dict[str, Any]]) -> str:
    """The contact channel the memory section of the packed context quotes, if any."""
    for message in messages:
        content = message_text(message.get("content"))
        if message.get("role") == "system" and content.startswith("Remembered"):
            found = _REMEMBERED_CHANNEL.search(content)
            if found:
                return found["channel"]
    return ""


def _run_input(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The run input the agent gave as data (ToolAgent's input_context)."""
    for message in messages:
        content = message_text(message.get("content"))
        if message.get("role") == "system" and content.startswith(_INPUT_DATA):
            data = _json(content[len(_INPUT_DATA) :])
            return data if isinstance(data, dict) else {}
    return {}


def _this_run(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages after the current request: this run's tool calls and results."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return messages[index + 1 :]
    return messages


def _call(messages: list[dict[str, Any]], name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call whose id is derived from the request and the turn."""
    turn = sum(1 for m in _this_run(messages) if m.get("role") == "assistant")
    digest = hashlib.sha256(last_user(messages).encode()).hexdigest()[:12]
    return {"id": f"call_{digest}_{turn}", "name": name, "arguments": arguments}


def _answered_call(messages: list[dict[str, Any]], result: dict[str, Any]) -> dict[str, Any]:
    """The call (name, arguments) a tool message answers, from the assistant's tool_calls."""
    for message in reversed(messages):
        for call in message.get("tool_calls") or []:
            if call.get("id") == result.get("tool_call_id"):
                function = call.get("function") or {}
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    arguments = _json(arguments)
                return {"name": str(function.get("name") or ""), "arguments": arguments}
    return {"name": "", "arguments": None}


def _json(text: Any) -> Any:
    try:
        return json_input.loads(str(text or ""))
    except ValueError:
        return None


RULES: list[Rule] = [(_asks_for_refund, _refund_desk)]
SCRIPT = Script(rules=RULES, default=DEFAULT)
