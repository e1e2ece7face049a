"""Facts extracted from what the user says: by the model's memory tools when a real model is
configured, by patterns offline; either way under the policies, the secret filter and the
audit, committed with the step."""

from __future__ import annotations

import json

import pytest

from agents.runtime.definitions import Agent, finish, register
from agents.runtime.engine.runner import drive
from agents.runtime.services import conversation_start
from memory.facts import extraction
from memory.facts.extraction import Operation
from tenants.scope import tenant_scope
from tests import factories
from tests.fakes.openai_server import FakeOpenAIServer, ok
from tests.memory.conftest import facts_of, remember

pytestmark = pytest.mark.django_db

listener = Agent("memory_listener", version=1, first="listen")


@listener.step
def listen(ctx):
    done = ctx.memory.extract()
    return finish({"operations": [op.kind for op in done]})


register(listener)


def say(membership, message: str):
    actor = factories.principal_for(membership)
    with tenant_scope(actor.tenant.pk):
        run = conversation_start(principal=actor, agent="memory_listener", message=message)
    drive(tenant_id=str(actor.tenant.pk), run_id=run.pk, worker="test-worker")
    with tenant_scope(actor.tenant.pk):
        run.refresh_from_db()
    return run


@pytest.fixture
def model_server(settings):
    with FakeOpenAIServer() as server:
        settings.LLM_PROVIDER = "openai"
        settings.LLM_BASE_URL = server.base_url
        settings.LLM_MODEL = "fake-model"
        yield server


def live(membership) -> dict[str, tuple[str, str]]:
    return {f.key: (f.text, f.category) for f in facts_of(membership, live_only=True)}


# --- patterns (offline) ---------------------------------------------------------------------------


def test_the_patterns_find_a_contact_channel_and_a_name():
    found = extraction.from_patterns("Hi, my name is Ada. Please contact me by e-mail.")
    assert found == [
        Operation("propose", "contact.channel", "Prefers to be contacted by email", "preference"),
        Operation("propose", "profile.name", "Is called Ada", "profile"),
    ]


def test_the_patterns_hear_a_request_to_forget():
    assert extraction.from_patterns("Please forget how I want to be contacted by phone") == [
        Operation("forget", "contact.channel")
    ]


def test_offline_a_step_remembers_what_the_patterns_find_and_forgets_on_request(
    members, no_embeddings
):
    ada = members["member"]
    run = say(ada, "I prefer SMS, thanks.")
    assert run.status == "succeeded"
    assert live(ada) == {"contact.channel": ("Prefers to be contacted by sms", "preference")}

    say(ada, "Please forget my contact preference.")
    assert live(ada) == {}


# --- the model's memory tools ---------------------------------------------------------------------


def test_the_model_proposes_and_supersedes_through_tool_calls(members, model_server, no_embeddings):
    ada = members["member"]
    remember(ada, "Prefers to be contacted by email", key="contact.channel")
    model_server.enqueue(
        ok("", tool_calls=[
            {"id": "c1", "name": "memory_propose",
             "arguments": {"category": "profile", "text": "Lives in Lyon", "key": "home.city"}},
            {"id": "c2", "name": "memory_supersede",
             "arguments": {"key": "contact.channel", "text": "Prefers phone calls"}},
        ])
    )  # fmt: skip

    run = say(ada, "I moved to Lyon, and call me rather than email.")

    assert run.output == {"operations": ["propose", "supersede"]}
    assert live(ada) == {
        "home.city": ("Lives in Lyon", "profile"),
        "contact.channel": ("Prefers phone calls", "preference"),
    }
    # The model saw the known facts and the message as quoted data, with the three tools.
    [request] = model_server.requests
    data = json.loads(request.body["messages"][-1]["content"])
    assert data["known_facts"][0]["key"] == "contact.channel"
    assert data["user_message"] == "I moved to Lyon, and call me rather than email."
    assert [t["function"]["name"] for t in request.body["tools"]] == [
        "memory_propose",
        "memory_supersede",
        "memory_forget",
    ]


def test_the_model_forgets_a_fact_the_user_asks_it_to(members, model_server, no_embeddings):
    ada = members["member"]
    remember(ada, "Prefers to be contacted by email", key="contact.channel")
    model_server.enqueue(
        ok(
            "",
            tool_calls=[
                {"id": "c1", "name": "memory_forget", "arguments": {"key": "contact.channel"}}
            ],
        )
    )

    say(ada, "Forget how to contact me.")

    assert live(ada) == {}


def test_a_secret_the_model_proposes_is_refused_and_nothing_is_stored(
    members, model_server, no_embeddings
):
    ada = members["member"]
    model_server.enqueue(
        ok("", tool_calls=[{"id": "c1", "name": "memory_propose",
                            "arguments": {"category": "note", "text": "Card 4111 1111 1111 1111"}}])
    )  # fmt: skip

    run = say(ada, "my card is 4111 1111 1111 1111")

    assert run.status == "succeeded"
    assert live(ada) == {}


def test_tool_calls_that_do_not_fit_are_dropped():
    calls = [
        {"name": "memory_propose", "arguments": None},
        {"name": "memory_supersede", "arguments": {"text": "no key"}},
        {"name": "delete_everything", "arguments": {"key": "x"}},
    ]
    assert extraction.from_tool_calls(calls) == []


@pytest.mark.parametrize(
    "message,facts",
    [
        (
            "Hi, I was charged twice for order A-1002, can I get a refund of 40.00? Please "
            "email me at alice@example.com",
            [
                ("contact.channel", "Prefers to be contacted by email"),
                ("contact.email", "Email address is alice@example.com"),
            ],
        ),
        ("just text me when it's done", [("contact.channel", "Prefers to be contacted by sms")]),
        (
            "call me on +1 (555) 010-0100 please",
            [
                ("contact.channel", "Prefers to be contacted by phone"),
                ("contact.phone", "Phone number is +1 (555) 010-0100"),
            ],
        ),
        ("I prefer WhatsApp", [("contact.channel", "Prefers to be contacted by WhatsApp")]),
        ("contact me on whatsapp", [("contact.channel", "Prefers to be contacted by WhatsApp")]),
        ("you can reach me at bob@corp.io", [("contact.email", "Email address is bob@corp.io")]),
        ("WhatsApp is best for me", [("contact.channel", "Prefers to be contacted by WhatsApp")]),
        (
            "I'd rather be contacted by email",
            [("contact.channel", "Prefers to be contacted by email")],
        ),
        ("I prefer a phone call", [("contact.channel", "Prefers to be contacted by phone")]),
        (
            "Send me an email when it's done",
            [("contact.channel", "Prefers to be contacted by email")],
        ),
        (
            "please use whatsapp to reach me",
            [("contact.channel", "Prefers to be contacted by WhatsApp")],
        ),
        ("call me back later", []),
        ("I'd rather not be emailed", []),
        ("Can I send you an email?", []),
    ],
)
def test_the_patterns_remember_the_contact_facts_people_state(message, facts):
    found = extraction.from_patterns(message)
    assert [(op.key, op.text) for op in found] == facts
    assert {op.kind for op in found} <= {"propose"}
