"""The LLM client layer: one `chat()` call, streamed or not, with failures as step errors.

`OpenAIChatModel` talks to any OpenAI-compatible endpoint through the official client;
`ScriptedModel` is deterministic and offline, for the demo and tests. `get_model()` picks one
from settings. Neither retries: the step executor owns retries, backoff and checkpoints.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol

import openai
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from agents.runtime.errors import (
    LLMConnectionError,
    LLMRateLimited,
    LLMRequestRejected,
    LLMServerError,
    LLMTimeout,
    StepError,
)
from core import json_input

TokenCallback = Callable[[str], None]


@dataclass
class ChatResult:
    """One assistant turn: text, tool calls (`{"id", "name", "arguments": dict}`), usage."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(
        default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0}
    )
    model: str = ""
    provider: str = ""  # "openai", "scripted": which client answered


class ChatModel(Protocol):
    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> ChatResult:
        """Answer the conversation; stream text deltas to `on_token` when it is given."""
        ...


# --- OpenAI-compatible endpoints ------------------------------------------------------------------


class OpenAIChatModel(ChatModel):
    provider = "openai"

    def __init__(self, base_url: str, api_key: str, model: str, timeout: float) -> None:
        self.base_url = base_url
        self.model = model
        self.timeout = timeout
        self._client = openai.OpenAI(
            base_url=base_url,
            # Local servers (Ollama, vLLM) need no key, but the client refuses to start without one.
            api_key=api_key or "unused",
            timeout=timeout,
            # Retries belong to the step executor, which checkpoints and backs off between them.
            max_retries=0,
        )

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> ChatResult:
        """Make one chat completion call; provider failures become `StepError`s."""
        params: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            params["tools"] = tools
        try:
            if on_token is None:
                return self._result(self._client.chat.completions.create(**params))
            stream = self._client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True}
            )
            return self._assemble(stream, on_token)
        except openai.APIError as exc:
            raise self._step_error(exc) from exc

    def _result(self, response: Any) -> ChatResult:
        if not response.choices:
            raise LLMServerError("LLM returned no choices")
        message = response.choices[0].message
        calls = [
            _tool_call(call.id, call.function.name, call.function.arguments)
            for call in message.tool_calls or []
            if getattr(call, "function", None) is not None
        ]
        return ChatResult(
            content=message.content or "",
            tool_calls=calls,
            usage=_usage(response.usage),
            model=response.model or self.model,
            provider=self.provider,
        )

    def _assemble(self, stream: Any, on_token: TokenCallback) -> ChatResult:
        parts: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage: Any = None
        model = self.model
        for chunk in stream:
            model = chunk.model or model
            usage = chunk.usage or usage
            for choice in chunk.choices:
                if choice.index != 0:
                    continue
                delta = choice.delta
                if delta.content:
                    parts.append(delta.content)
                    on_token(delta.content)
                for call in delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] = call.id or entry["id"]
                    if call.function is not None:
                        # Names and arguments arrive in fragments, in order, as the SDK documents.
                        entry["name"] += call.function.name or ""
                        entry["arguments"] += call.function.arguments or ""
        return ChatResult(
            content="".join(parts),
            tool_calls=[
                _tool_call(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())
            ],
            usage=_usage(usage),
            model=model,
            provider=self.provider,
        )

    def _step_error(self, exc: openai.APIError) -> StepError:
        # APITimeoutError subclasses APIConnectionError, so it is checked first.
        if isinstance(exc, openai.APITimeoutError):
            return LLMTimeout(f"LLM call timed out after {self.timeout:g} s")
        if isinstance(exc, openai.APIConnectionError):
            return LLMConnectionError(f"Could not reach the LLM at {self.base_url}")
        if not isinstance(exc, openai.APIStatusError):
            # An error event in the middle of a stream: the provider failed, not our request.
            return LLMServerError(f"LLM stream failed: {_short(exc.message)}")
        status = exc.status_code
        retry_after = parse_retry_after(exc.response.headers)
        wait = f"; retry after {retry_after:.1f} s" if retry_after is not None else ""
        if status == 429:
            return LLMRateLimited(f"LLM rate limited (429){wait}", retry_after=retry_after)
        if status >= 500:
            return LLMServerError(f"LLM server error ({status}){wait}", retry_after=retry_after)
        if status == 408:
            return LLMTimeout("LLM server timed out reading the request (408)")
        return LLMRequestRejected(f"LLM rejected the request ({status}): {_short(exc.message)}")


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP date), or None."""
    value = (headers or {}).get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    try:
        # Through the input validator: a NUL or lone surrogate could not be stored in the
        # ledger, and deep nesting would exhaust the parser's recursion.
        parsed = json_input.loads(arguments) if arguments.strip() else {}
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        # Sampling produced a malformed call. The text is not kept (it may hold what the
        # ledger cannot store); the caller tells the model its arguments were not an object.
        return {"id": call_id, "name": name, "arguments": None}
    return {"id": call_id, "name": name, "arguments": parsed}


def _usage(usage: Any) -> dict[str, int]:
    return {
        "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
    }


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- the scripted model ---------------------------------------------------------------------------

Reply = str | dict[str, Any] | Callable[[list[dict[str, Any]]], str | dict[str, Any]]
# A matcher: a substring (any case) or a pattern of the last user or tool message, or a
# predicate of the whole conversation.
Matcher = str | re.Pattern[str] | Callable[[list[dict[str, Any]]], bool]
Rule = tuple[Matcher, Reply]


class ScriptedModel(ChatModel):
    """Replies by rule to the last user or tool message; deterministic and offline.

    A reply is text, or a dict with `content` and `tool_calls` (`{"name", "arguments", "id"?}`;
    without an id, one derived from the conversation). Tools are called only when the caller
    offers some; otherwise the dict's `without_tools` text (or its content) is the answer."""

    model = "scripted"
    provider = "scripted"

    def __init__(
        self, rules: Sequence[Rule], *, default: Reply = "OK.", delay_seconds: float = 0.0
    ) -> None:
        self.rules = list(rules)
        self.default = default
        self.delay_seconds = delay_seconds

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_token: TokenCallback | None = None,
    ) -> ChatResult:
        """Reply with the first rule whose matcher fits, else the default."""
        # Streaming spends half the delay thinking and half writing, so a live page shows
        # the reply arrive word by word; the call takes delay_seconds either way.
        thinking = self.delay_seconds / 2 if on_token is not None else self.delay_seconds
        if thinking:
            time.sleep(thinking)
        reply = self._pick(messages)
        if callable(reply):
            reply = reply(messages)
        if isinstance(reply, str):
            reply = {"content": reply}
        wanted = reply.get("tool_calls") or []
        content = str(reply.get("content") or "")
        if wanted and not tools and "without_tools" in reply:
            wanted, content = [], str(reply["without_tools"])
        calls = [
            {
                # Derived from the conversation, so a replayed step gets the same ids.
                "id": call.get("id") or f"call_{len(messages)}_{index}",
                "name": call["name"],
                "arguments": dict(call.get("arguments") or {}),
            }
            for index, call in enumerate(wanted)
        ]
        if on_token is not None:
            words = re.findall(r"[^ ]+ *| +", content)
            for word in words:
                if self.delay_seconds:
                    time.sleep(self.delay_seconds / 2 / len(words))
                on_token(word)
        return ChatResult(
            content=content,
            tool_calls=calls,
            usage={
                "prompt_tokens": sum(len(_text(m.get("content")).split()) for m in messages),
                "completion_tokens": len(content.split()),
            },
            model=self.model,
            provider=self.provider,
        )

    def _pick(self, messages: list[dict[str, Any]]) -> Reply:
        text = _last_input(messages)
        for matcher, reply in self.rules:
            if isinstance(matcher, re.Pattern):
                if matcher.search(text):
                    return reply
            elif isinstance(matcher, str):
                if matcher.lower() in text.lower():
                    return reply
            elif matcher(messages):
                return reply
        return self.default


def _last_input(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") in ("user", "tool"):
            return _text(message.get("content"))
    return ""


def _last_user(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def _text(content: Any) -> str:
    if isinstance(content, list):
        # Multi-part content: only the text parts can match.
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


# --- the demo script: a refund desk that calls tools ----------------------------------------------
#
# It plays the model of agents/demo/refund_desk.py in the OpenAI tool-calling format, and what
# it does next depends only on the conversation (so a replayed step asks for the same calls):
#   a refund request                  -> billing_history(customer)
#   the billing history               -> issue_refund(customer, order, amount) when the order and
#                                        amount match it, else an answer saying they do not
#   the refund's receipt              -> "Done: ..." (and the remembered contact channel)
#   a declined or failed refund       -> an answer saying it was declined
#   anything else                     -> DEMO_DEFAULT

_REFUND_REQUEST = re.compile(r"refund.*\$\s?\d|\$\s?\d.*refund", re.I | re.S)
_AMOUNT = re.compile(r"\$\s?(\d[\d,]*(?:\.\d{1,2})?)")
_ORDER = re.compile(r"\b([A-Z]-\d{3,})\b")
_INPUT_DATA = "Run input (data): "
# A remembered fact, as the memory section quotes it (JSON strings in a system message).
_REMEMBERED_CHANNEL = re.compile(r'"Prefers to be contacted by (?P<channel>[A-Za-z-]+)"')
_DECLINED_BY_A_PERSON = re.compile(r"declined", re.I)


def _asks_for_refund(messages: list[dict[str, Any]]) -> bool:
    """The conversation's current request asks for a refund of an amount."""
    return bool(_REFUND_REQUEST.search(_last_user(messages)))


def _refund_desk(messages: list[dict[str, Any]]) -> dict[str, Any]:
    request = _last_user(messages)
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


def _requested(request: str) -> tuple[Decimal, str, str]:
    """The amount, order and reason the request names (A-1001 when it names no order)."""
    found = _AMOUNT.search(request)
    amount = Decimal(found.group(1).replace(",", "")) if found else Decimal(0)
    order = _ORDER.search(request)
    reason = (
        "duplicate charge" if re.search(r"duplicate|twice", request, re.I) else "customer request"
    )
    # More digits than any bill has: left as it is, it will not match one.
    with contextlib.suppress(ArithmeticError):
        amount = amount.quantize(Decimal("0.01"))
    return amount, order.group(1) if order else "A-1001", reason


def _decision(request: str) -> str:
    amount, order, reason = _requested(request)
    return f"Refund {amount} USD for order {order}: {reason}."


def _decide(messages: list[dict[str, Any]], request: str, billing: Any) -> dict[str, Any]:
    amount, order, _ = _requested(request)
    orders = billing.get("orders") if isinstance(billing, dict) else None
    known = {str(o.get("order")): o for o in orders or [] if isinstance(o, dict)}
    try:
        matches = order in known and amount <= Decimal(str(known[order].get("amount")))
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
        content = _text(message.get("content"))
        if message.get("role") == "system" and content.startswith("Remembered"):
            found = _REMEMBERED_CHANNEL.search(content)
            if found:
                return found["channel"]
    return ""


def _run_input(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The run input the agent gave as data (ToolAgent's input_context)."""
    for message in messages:
        content = _text(message.get("content"))
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
    digest = hashlib.sha256(_last_user(messages).encode()).hexdigest()[:12]
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


DEMO_SCRIPT: list[Rule] = [(_asks_for_refund, _refund_desk)]
DEMO_DEFAULT = (
    "Hello, this is the refund desk. Tell me the order and the amount, "
    "for example: please refund $40 for order A-1001."
)


# --- choosing a model from settings ---------------------------------------------------------------


def get_model() -> ChatModel:
    """The chat model the settings ask for."""
    provider = getattr(settings, "LLM_PROVIDER", "scripted")
    if provider == "scripted":
        delay = float(getattr(settings, "LLM_SCRIPTED_DELAY_SECONDS", 0.0))
        return ScriptedModel(DEMO_SCRIPT, default=DEMO_DEFAULT, delay_seconds=delay)
    if provider == "openai":
        return OpenAIChatModel(
            base_url=getattr(settings, "LLM_BASE_URL", "http://127.0.0.1:11434/v1"),
            api_key=getattr(settings, "LLM_API_KEY", ""),
            model=getattr(settings, "LLM_MODEL", "gpt-4o-mini"),
            timeout=float(getattr(settings, "LLM_TIMEOUT_SECONDS", 60.0)),
        )
    raise ImproperlyConfigured(f"LLM_PROVIDER must be 'scripted' or 'openai', not {provider!r}")
