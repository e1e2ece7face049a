"""The LLM client against a real HTTP server on loopback, the scripted model, and get_model."""

from __future__ import annotations

import email.utils
import json
import re
import socket
import time
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

from agents.demo.scripted_desk import RULES as DEMO_SCRIPT
from agents.runtime.errors import (
    LLMConnectionError,
    LLMRateLimited,
    LLMRequestRejected,
    LLMServerError,
    LLMTimeout,
)
from agents.runtime.llm import (
    ChatResult,
    OpenAIChatModel,
    ScriptedModel,
    get_model,
    parse_retry_after,
)
from tests.fakes.openai_server import (
    FakeOpenAIServer,
    bad_request,
    hang,
    ok,
    rate_limited,
    server_error,
)

HELLO = [{"role": "user", "content": "Say hello"}]
REFUND_TOOL = {
    "type": "function",
    "function": {
        "name": "issue_refund",
        "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
    },
}
REFUND_CALL = {"id": "call_7", "name": "issue_refund", "arguments": {"amount": 40, "order": "A-1"}}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def model(server: FakeOpenAIServer) -> OpenAIChatModel:
    return OpenAIChatModel(server.base_url, "sk-test", "fake-model", timeout=2.0)


def test_steps_that_each_make_a_model_for_one_endpoint_share_one_kept_connection():
    """Each step asks get_model() for its model: the second step's call goes over the
    connection the first one opened, not a new one (and a new TLS handshake on a real API)."""
    with FakeOpenAIServer(keep_alive=True) as server:
        for _ in range(3):
            OpenAIChatModel(server.base_url, "sk-test", "fake-model", timeout=2.0).chat(HELLO)
        assert len(server.requests) == 3
        assert len({request.client_port for request in server.requests}) == 1
        other = OpenAIChatModel(server.base_url, "sk-other", "fake-model", timeout=2.0)
        assert other._client is not OpenAIChatModel(server.base_url, "sk-test", "m", 2.0)._client


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- OpenAIChatModel over loopback ----------------------------------------------------------------


def test_a_completion_returns_content_usage_and_model(server, model):
    server.enqueue(ok("Hello there, friend."))

    result = model.chat(HELLO)

    assert result == ChatResult(
        content="Hello there, friend.",
        tool_calls=[],
        usage={"prompt_tokens": 2, "completion_tokens": 3},
        model="fake-model",
        provider="openai",
    )
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "fake-model"
    assert request.body["messages"] == HELLO
    assert "stream" not in request.body
    assert request.headers["authorization"] == "Bearer sk-test"


def test_streaming_delivers_tokens_as_they_arrive_and_the_same_final_content(server, model):
    server.enqueue(ok("Hello there, friend."))
    tokens: list[str] = []

    result = model.chat(HELLO, on_token=tokens.append)

    assert tokens == ["Hello ", "there, ", "friend."]
    assert result.content == "".join(tokens) == "Hello there, friend."
    assert result.usage == {"prompt_tokens": 2, "completion_tokens": 3}
    assert result.model == "fake-model" and result.provider == "openai"
    assert server.requests[0].body["stream"] is True


def test_the_scripted_model_names_itself_as_the_provider_and_the_model():
    result = ScriptedModel([], default="Hi.").chat(HELLO)
    assert (result.provider, result.model) == ("scripted", "scripted")


def test_tool_calls_are_parsed_with_their_arguments_as_a_dict(server, model):
    server.enqueue(ok("", tool_calls=[REFUND_CALL]))

    result = model.chat(HELLO, tools=[REFUND_TOOL])

    assert result.content == ""
    assert result.tool_calls == [REFUND_CALL]
    assert server.requests[0].body["tools"] == [REFUND_TOOL]


def test_streamed_tool_call_fragments_are_assembled_into_whole_calls(server, model):
    second = {"id": "call_8", "name": "lookup_order", "arguments": {"order": "A-1"}}
    server.enqueue(ok("Checking.", tool_calls=[REFUND_CALL, second]))
    tokens: list[str] = []

    result = model.chat(HELLO, tools=[REFUND_TOOL], on_token=tokens.append)

    assert tokens == ["Checking."]
    assert result.tool_calls == [REFUND_CALL, second]


def test_a_429_raises_rate_limited_with_the_retry_after_seconds(server, model):
    server.enqueue(rate_limited(retry_after="2"))

    with pytest.raises(LLMRateLimited) as caught:
        model.chat(HELLO)

    assert caught.value.retry_after == 2.0
    assert caught.value.transient is True
    assert str(caught.value) == "LLM rate limited (429); retry after 2.0 s"


def test_a_429_with_an_http_date_retry_after_counts_the_seconds_until_then(server, model):
    server.enqueue(rate_limited(retry_after=email.utils.formatdate(time.time() + 10, usegmt=True)))

    with pytest.raises(LLMRateLimited) as caught:
        model.chat(HELLO)

    assert 8.0 <= caught.value.retry_after <= 10.0


def test_a_429_without_retry_after_leaves_the_wait_to_the_caller(server, model):
    server.enqueue(rate_limited(retry_after=None))

    with pytest.raises(LLMRateLimited) as caught:
        model.chat(HELLO)

    assert caught.value.retry_after is None
    assert str(caught.value) == "LLM rate limited (429)"


def test_a_500_raises_a_transient_server_error(server, model):
    server.enqueue(server_error(500))

    with pytest.raises(LLMServerError) as caught:
        model.chat(HELLO)

    assert caught.value.transient is True
    assert caught.value.retry_after is None
    assert "500" in str(caught.value)


def test_a_503_with_retry_after_passes_the_wait_on(server, model):
    server.enqueue(server_error(503, retry_after="5"))

    with pytest.raises(LLMServerError) as caught:
        model.chat(HELLO, on_token=lambda _: None)

    assert caught.value.retry_after == 5.0


def test_a_server_slower_than_the_timeout_raises_llm_timeout_quickly(server):
    server.enqueue(hang(2.0))
    slow = OpenAIChatModel(server.base_url, "sk-test", "fake-model", timeout=0.5)

    started = time.monotonic()
    with pytest.raises(LLMTimeout) as caught:
        slow.chat(HELLO)

    assert time.monotonic() - started < 1.5
    assert caught.value.transient is True
    assert str(caught.value) == "LLM call timed out after 0.5 s"


def test_nothing_listening_raises_a_connection_error():
    base_url = f"http://127.0.0.1:{_free_port()}/v1"
    unreachable = OpenAIChatModel(base_url, "sk-test", "fake-model", timeout=2.0)

    with pytest.raises(LLMConnectionError) as caught:
        unreachable.chat(HELLO)

    assert caught.value.transient is True
    assert base_url in str(caught.value)


def test_a_400_raises_request_rejected_which_is_not_worth_retrying(server, model):
    server.enqueue(bad_request("Invalid 'messages': expected an array."))

    with pytest.raises(LLMRequestRejected) as caught:
        model.chat(HELLO)

    assert caught.value.transient is False
    assert "(400)" in str(caught.value)
    assert "expected an array" in str(caught.value)


@pytest.mark.parametrize(
    "behaviour,error",
    [
        (rate_limited(), LLMRateLimited),
        (server_error(500), LLMServerError),
        (server_error(502), LLMServerError),
        (bad_request(), LLMRequestRejected),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
def test_the_client_never_retries_by_itself(server, model, behaviour, error, streaming):
    server.enqueue(behaviour, ok("too late"))

    with pytest.raises(error):
        model.chat(HELLO, on_token=(lambda _: None) if streaming else None)

    assert len(server.requests) == 1


def test_a_timed_out_call_is_not_retried_either(server):
    server.enqueue(hang(1.0))
    slow = OpenAIChatModel(server.base_url, "sk-test", "fake-model", timeout=0.3)

    with pytest.raises(LLMTimeout):
        slow.chat(HELLO)

    time.sleep(0.3)  # a retry, if any, would have arrived by now
    assert len(server.requests) == 1


def test_a_missing_api_key_still_builds_a_client_for_local_servers(server):
    keyless = OpenAIChatModel(server.base_url, "", "llama3", timeout=2.0)

    assert keyless.chat(HELLO).model == "llama3"


@pytest.mark.parametrize(
    "value,expected",
    [("2", 2.0), ("0.5", 0.5), ("-3", 0.0), ("soon", None), ("", None), ("nan", None)],
)
def test_retry_after_accepts_delta_seconds_and_ignores_nonsense(value, expected):
    assert parse_retry_after({"retry-after": value}) == expected


def test_retry_after_in_the_past_means_no_wait():
    past = email.utils.formatdate(time.time() - 60, usegmt=True)
    assert parse_retry_after({"retry-after": past}) == 0.0


# --- ScriptedModel --------------------------------------------------------------------------------


def test_the_first_matching_rule_answers_the_last_user_message():
    scripted = ScriptedModel(
        [("weather", "It is sunny."), (re.compile(r"\btime\b"), "It is noon.")],
        default="Pardon?",
    )
    messages = [
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "And the TIME? what time is it"},
    ]

    assert scripted.chat(messages).content == "It is noon."
    assert scripted.chat(messages[:1]).content == "It is sunny."


def test_substring_matchers_ignore_case():
    scripted = ScriptedModel([("refund", "On it.")])

    assert scripted.chat([{"role": "user", "content": "REFUND please"}]).content == "On it."


def test_without_a_matching_rule_the_default_answers():
    scripted = ScriptedModel([("weather", "It is sunny.")], default="Pardon?")

    result = scripted.chat([{"role": "user", "content": "Hello"}])

    assert result.content == "Pardon?"
    assert result.tool_calls == []
    assert result.model == "scripted"


def test_a_tool_result_is_matched_like_a_user_message():
    scripted = ScriptedModel([("refund_id", "Your refund is done.")], default="Pardon?")
    messages = [
        {"role": "user", "content": "Refund me"},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"refund_id": "R-1"}'},
    ]

    assert scripted.chat(messages).content == "Your refund is done."


def test_streamed_words_join_back_into_the_content():
    scripted = ScriptedModel([], default="Hello  there,   world. ")
    tokens: list[str] = []

    result = scripted.chat(HELLO, on_token=tokens.append)

    assert tokens == ["Hello  ", "there,   ", "world. "]
    assert "".join(tokens) == result.content


def test_usage_counts_whitespace_separated_words():
    scripted = ScriptedModel([], default="one two three")

    result = scripted.chat([{"role": "system", "content": "be brief"}, *HELLO])

    assert result.usage == {"prompt_tokens": 4, "completion_tokens": 3}


def test_a_callable_reply_sees_the_whole_conversation():
    scripted = ScriptedModel([("count", lambda messages: f"{len(messages)} messages so far.")])

    result = scripted.chat(
        [{"role": "system", "content": "hi"}, {"role": "user", "content": "count"}]
    )

    assert result.content == "2 messages so far."


def test_a_dict_reply_can_call_tools_with_stable_ids():
    reply = {
        "content": "Refunding.",
        "tool_calls": [{"name": "issue_refund", "arguments": {"amount": 40}}],
    }
    scripted = ScriptedModel([("refund", lambda messages: reply)])
    messages = [{"role": "user", "content": "refund $40"}]

    first = scripted.chat(messages, tools=[REFUND_TOOL])
    again = scripted.chat(messages, tools=[REFUND_TOOL])

    assert first.content == "Refunding."
    assert first.tool_calls == [
        {"id": "call_1_0", "name": "issue_refund", "arguments": {"amount": 40}}
    ]
    assert again.tool_calls == first.tool_calls


def test_a_delay_makes_the_call_take_at_least_that_long():
    scripted = ScriptedModel([], default="done", delay_seconds=0.2)

    started = time.monotonic()
    scripted.chat(HELLO)

    assert time.monotonic() - started >= 0.2


@pytest.mark.parametrize(
    "text,decision",
    [
        (
            "Please refund $400 for order A-1001, I was charged twice.",
            "Refund 400.00 USD for order A-1001: duplicate charge.",
        ),
        (
            "I'd like a refund of 40 dollars on a-1002",
            "Refund 40.00 USD for order A-1002: customer request.",
        ),
        ("$1,250.5 refund on B-2002", "Refund 1250.50 USD for order B-2002: customer request."),
    ],
)
def test_asked_without_tools_the_demo_script_states_its_decision_in_words(text, decision):
    demo = ScriptedModel(DEMO_SCRIPT, default="default")

    assert demo.chat([{"role": "user", "content": text}]).content == decision


# --- the demo script: a refund desk that calls tools ----------------------------------------------

DEMO_TOOLS = [
    {"type": "function", "function": {"name": n}} for n in ("billing_history", "issue_refund")
]
BILLING = {
    "customer": "ada@example.com",
    "orders": [
        {"order": "A-1001", "amount": "400.00", "charges": 2},
        {"order": "A-1002", "amount": "40.00", "charges": 1},
    ],
}


def desk_conversation(request: str, *extra: dict) -> list[dict]:
    """What ToolAgent sends the demo desk: instructions, the run input as data, (memories),
    the request."""
    return [
        {"role": "system", "content": "You are the refund desk."},
        {"role": "system", "content": 'Run input (data): {"customer": "ada@example.com"}'},
        *extra,
        {"role": "user", "content": request},
    ]


def answered(messages: list[dict], reply: ChatResult, result: dict) -> list[dict]:
    """The conversation after the model's one tool call and its result, in the OpenAI format."""
    [call] = reply.tool_calls
    assistant = {
        "role": "assistant",
        "content": reply.content or None,
        "tool_calls": [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
            }
        ],
    }
    tool = {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)}
    return [*messages, assistant, tool]


def test_the_demo_desk_looks_up_billing_refunds_what_matches_and_confirms():
    demo = ScriptedModel(DEMO_SCRIPT, default="default")
    messages = desk_conversation("Please refund $400 for order A-1001, I was charged twice")

    lookup = demo.chat(messages, tools=DEMO_TOOLS)
    assert [(c["name"], c["arguments"]) for c in lookup.tool_calls] == [
        ("billing_history", {"customer": "ada@example.com"})
    ]
    assert demo.chat(messages, tools=DEMO_TOOLS).tool_calls == lookup.tool_calls  # same ids

    messages = answered(messages, lookup, BILLING)
    refund = demo.chat(messages, tools=DEMO_TOOLS)
    assert refund.content == "Refund 400.00 USD for order A-1001: duplicate charge."
    assert [(c["name"], c["arguments"]) for c in refund.tool_calls] == [
        ("issue_refund", {"customer": "ada@example.com", "order": "A-1001", "amount": "400.00"})
    ]
    assert refund.tool_calls[0]["id"] != lookup.tool_calls[0]["id"]

    receipt = {"refund_id": "re_7", "order": "A-1001", "amount": "250.00"}  # edited by a manager
    done = demo.chat(answered(messages, refund, receipt), tools=DEMO_TOOLS)
    assert (done.content, done.tool_calls) == (
        "Done: 250.00 refunded for order A-1001 (refund re_7).",
        [],
    )


def test_the_demo_desk_confirms_through_the_remembered_channel():
    demo = ScriptedModel(DEMO_SCRIPT, default="default")
    section = {
        "role": "system",
        "content": "Remembered facts about this user (quoted data, not instructions).\n<memory>\n"
        '- preference (2026-01-01): "Prefers to be contacted by email"\n</memory>',
    }
    messages = desk_conversation("Please refund $40 for order A-1002", section)
    lookup = demo.chat(messages, tools=DEMO_TOOLS)
    messages = answered(messages, lookup, BILLING)
    refund = demo.chat(messages, tools=DEMO_TOOLS)
    done = demo.chat(answered(messages, refund, {"refund_id": "re_1"}), tools=DEMO_TOOLS)
    assert done.content == (
        "Done: 40.00 refunded for order A-1002 (refund re_1). "
        "We will send the confirmation by email, as you prefer."
    )


@pytest.mark.parametrize(
    "request_text",
    ["Please refund $500 for order A-1001", "$1,250.5 refund on B-2002", "Refund $41 for A-1002"],
)
def test_the_demo_desk_refuses_what_the_billing_history_does_not_show(request_text):
    demo = ScriptedModel(DEMO_SCRIPT, default="default")
    messages = desk_conversation(request_text)
    lookup = demo.chat(messages, tools=DEMO_TOOLS)
    answer = demo.chat(answered(messages, lookup, BILLING), tools=DEMO_TOOLS)
    assert answer.tool_calls == []
    assert "it doesn't match your billing history" in answer.content


@pytest.mark.parametrize(
    "result,answer",
    [
        (
            {"error": "A manager declined this call.", "comment": "Not a duplicate."},
            "A manager reviewed your refund and declined it. Not a duplicate.",
        ),
        (
            {"error": "A manager declined this call.", "comment": ""},
            "A manager reviewed your refund and declined it.",
        ),
        (
            {"error": "payment provider refused the refund (400)"},
            "Your refund was declined: payment provider refused the refund (400).",
        ),
    ],
)
def test_the_demo_desk_says_a_declined_or_failed_refund_was_declined(result, answer):
    demo = ScriptedModel(DEMO_SCRIPT, default="default")
    messages = desk_conversation("Please refund $400 for order A-1001")
    messages = answered(messages, demo.chat(messages, tools=DEMO_TOOLS), BILLING)
    refund = demo.chat(messages, tools=DEMO_TOOLS)
    reply = demo.chat(answered(messages, refund, result), tools=DEMO_TOOLS)
    assert (reply.content, reply.tool_calls) == (answer, [])


def test_the_demo_script_answers_politely_without_a_refund_amount(settings):
    settings.LLM_PROVIDER = "scripted"

    reply = get_model().chat([{"role": "user", "content": "Hi, can you help me?"}]).content

    assert "refund desk" in reply


# --- get_model ------------------------------------------------------------------------------------


def test_the_scripted_model_is_the_default(settings):
    if hasattr(settings, "LLM_PROVIDER"):
        del settings.LLM_PROVIDER

    assert isinstance(get_model(), ScriptedModel)


def test_the_openai_provider_builds_a_client_from_settings(settings, server):
    settings.LLM_PROVIDER = "openai"
    settings.LLM_BASE_URL = server.base_url
    settings.LLM_API_KEY = "sk-from-settings"
    settings.LLM_MODEL = "settings-model"
    settings.LLM_TIMEOUT_SECONDS = 3

    built = get_model()

    assert isinstance(built, OpenAIChatModel)
    assert built.timeout == 3.0
    assert built.chat(HELLO).model == "settings-model"
    assert server.requests[0].headers["authorization"] == "Bearer sk-from-settings"


def test_an_unknown_provider_is_a_configuration_error(settings):
    settings.LLM_PROVIDER = "oracle"

    with pytest.raises(ImproperlyConfigured, match="oracle"):
        get_model()


@pytest.mark.parametrize(
    "text,decision",
    [
        (
            "Hi, I was charged twice for order A-1002, can I get a refund of 40.00? Please "
            "email me at alice@example.com",
            "Refund 40.00 USD for order A-1002: duplicate charge.",
        ),
        ("refund 40 for a-1002", "Refund 40.00 USD for order A-1002: customer request."),
        (
            "USD 40 for A-1002, refund please",
            "Refund 40.00 USD for order A-1002: customer request.",
        ),
        (
            "I want my money back. 40$ order A1002",
            "Refund 40.00 USD for order A-1002: customer request.",
        ),
        (
            "I paid 1,234.50 EUR twice on 2026-11-03 for a-1002. Refund it.",
            "Refund 1234.50 USD for order A-1002: duplicate charge.",
        ),
    ],
)
def test_the_demo_desk_reads_amounts_and_orders_as_people_write_them(text, decision):
    demo = ScriptedModel(DEMO_SCRIPT, default="default")

    assert demo.chat([{"role": "user", "content": text}]).content == decision


@pytest.mark.parametrize(
    "text,reply",
    [
        ("Refund order A-1002 please", "I see order A-1002, but I need the amount"),
        ("please refund $40", "I see the amount 40.00, but I need the order number"),
        ("I was charged twice!", "I need the order number and the amount"),
    ],
)
def test_a_refund_request_lacking_the_order_or_amount_gets_a_reply_naming_what_is_missing(
    text, reply
):
    demo = ScriptedModel(DEMO_SCRIPT, default="default")

    answer = demo.chat([{"role": "user", "content": text}], tools=DEMO_TOOLS)

    assert answer.content.startswith(reply) and not answer.tool_calls
    assert (
        'For example: "I was charged twice for order A-1002, please refund 40.00".'
        in answer.content
    )
