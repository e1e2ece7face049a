"""The offline refund desk reads requests as people write them: 30+ differently written
messages, each gets the right tool call, or a reply naming exactly what was missing; and the
contact facts people state are remembered (memory/facts/extraction.py, tests/memory)."""

from __future__ import annotations

import json

import pytest

from agents.demo.scripted_desk import RULES
from agents.runtime.llm import ScriptedModel

TOOLS = [{"type": "function", "function": {"name": n}} for n in ("billing_history", "issue_refund")]
BILLING = {
    "customer": "ada",
    "orders": [
        {"order": "A-1001", "amount": "400.00"},
        {"order": "A-1002", "amount": "40.00"},
        {"order": "B-2002", "amount": "1250.50"},
    ],
}

REFUNDS = [
    ("Hi, I was charged twice for order A-1002, can I get a refund of 40.00?", "A-1002", "40.00"),
    ("please refund $40 for order A-1002", "A-1002", "40.00"),
    ("Please refund $40.00 for order A-1002", "A-1002", "40.00"),
    ("refund 40 for a-1002", "A-1002", "40.00"),
    ("Refund 40 dollars on A-1002 please", "A-1002", "40.00"),
    ("USD 40 for A-1002, refund please", "A-1002", "40.00"),
    ("I'd like a refund of 40 usd for order a-1002.", "A-1002", "40.00"),
    ("A-1002: please refund 40$", "A-1002", "40.00"),
    ("I want my money back. 40 bucks, order A1002", "A-1002", "40.00"),
    ("order #A-1002 was double charged, refund 40 please", "A-1002", "40.00"),
    ("Can you reimburse me 40.00 for A-1002? Thanks!", "A-1002", "40.00"),
    ("I was charged twice on 2026-11-03 for a-1002. Refund 40.", "A-1002", "40.00"),
    ("Refund for A-1002. Amount: $ 40", "A-1002", "40.00"),
    ("REFUND $40 FOR ORDER A-1002", "A-1002", "40.00"),
    ("hey, duplicate charge of 40 on a-1002 at 10:30, refund it", "A-1002", "40.00"),
    ("Please refund $400 for order A-1001, I was charged twice", "A-1001", "400.00"),
    ("refund 400 for a-1001", "A-1001", "400.00"),
    (
        "I got charged twice. The order is A-1001 and it was 400 dollars. Refund please.",
        "A-1001",
        "400.00",
    ),  # fmt: skip
    ("€400 twice on A-1001 – I'd like my money back", "A-1001", "400.00"),
    ("I was charged $40 twice for order A-1002", "A-1002", "40.00"),
    ("can i get 40 back for order a 1002", "A-1002", "40.00"),
    ("Could I have my 40 dollars back for order number A 1002?", "A-1002", "40.00"),
    ("refund 40,00 for A-1002", "A-1002", "40.00"),
    ("Order: A-1002\nAmount: 40.00\nReason: charged twice", "A-1002", "40.00"),
    ("My order A-1002 cost 40 and I was charged 2 times", "A-1002", "40.00"),
    ("Refund $1,250.50 on B-2002", "B-2002", "1250.50"),
    ("refund 1250.5 for b-2002", "B-2002", "1250.50"),
    ("refund 12,50 for B-2002", "B-2002", "12.50"),
    ("1,250 EUR back on B-2002 please, I was double charged", "B-2002", "1250.00"),
    ("B-2002 was charged twice (1,250.50 USD). Refund, please.", "B-2002", "1250.50"),
]
MISSING = [
    ("Refund order A-1002 please", "I see order A-1002, but I need the amount"),
    ("please refund $40", "I see the amount 40.00, but I need the order number"),
    ("I was charged twice!", "I need the order number and the amount"),
    ("I want my money back", "I need the order number and the amount"),
    ("refund forty dollars for A-1002", "I see order A-1002, but I need the amount"),
    ("refund $0 for A-1002", "I see order A-1002, but I need the amount"),
    ("Refund $40 and $50 on my last order", "I see the amount 40.00, but I need the order number"),
]
NOT_MATCHING = [
    ("refund $500 for A-1002", "I can't refund 500.00 for A-1002"),
    ("refund 40 for Z-9999", "I can't refund 40.00 for Z-9999"),
]


def desk(message: str) -> list[dict]:
    return [
        {"role": "system", "content": 'Run input (data): {"customer": "ada"}'},
        {"role": "user", "content": message},
    ]


def after_billing(messages: list[dict], model: ScriptedModel):
    lookup = model.chat(messages, tools=TOOLS)
    [call] = lookup.tool_calls
    assert (call["name"], call["arguments"]) == ("billing_history", {"customer": "ada"})
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call["id"], "type": "function",
             "function": {"name": "billing_history", "arguments": json.dumps(call["arguments"])}}
        ],
    }  # fmt: skip
    tool = {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(BILLING)}
    return model.chat([*messages, assistant, tool], tools=TOOLS)


def test_there_are_at_least_thirty_ways_of_writing_here():
    assert len(REFUNDS) + len(MISSING) + len(NOT_MATCHING) >= 30


@pytest.mark.parametrize("message,order,amount", REFUNDS)
def test_a_request_written_any_way_leads_to_the_refund_it_asks_for(message, order, amount):
    model = ScriptedModel(RULES, default="default")

    decided = after_billing(desk(message), model)

    assert [(c["name"], c["arguments"]) for c in decided.tool_calls] == [
        ("issue_refund", {"customer": "ada", "order": order, "amount": amount})
    ]


@pytest.mark.parametrize("message,reply", MISSING)
def test_a_request_lacking_something_gets_a_reply_naming_what(message, reply):
    answer = ScriptedModel(RULES, default="default").chat(desk(message), tools=TOOLS)

    assert answer.content.startswith(reply), answer.content
    assert not answer.tool_calls


@pytest.mark.parametrize("message,reply", NOT_MATCHING)
def test_a_request_the_billing_does_not_show_is_not_refunded(message, reply):
    decided = after_billing(desk(message), ScriptedModel(RULES, default="default"))

    assert decided.content.startswith(reply) and not decided.tool_calls


def test_the_same_message_always_gets_the_same_answer():
    model = ScriptedModel(RULES, default="default")
    first = model.chat(desk(REFUNDS[0][0]), tools=TOOLS)
    again = model.chat(desk(REFUNDS[0][0]), tools=TOOLS)
    assert first.tool_calls == again.tool_calls
