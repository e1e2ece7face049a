"""The LLM client layer: one `chat()` call, streamed or not, with failures as step errors.

`OpenAIChatModel` talks to any OpenAI-compatible endpoint through the official client;
`ScriptedModel` is deterministic and offline, for the demo and tests. `get_model()` picks one
from settings. Neither retries: the step executor owns retries, backoff and checkpoints.
"""

from __future__ import annotations

import email.utils
import functools
import math
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from agents.runtime.errors import (
    LLMConnectionError,
    LLMRateLimited,
    LLMRequestRejected,
    LLMServerError,
    LLMTimeout,
    StepError,
)
from core import json_input

if TYPE_CHECKING:
    import openai

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
        self._client = _client(base_url, api_key, timeout, os.getpid())

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
        except _openai().APIError as exc:
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
        openai = _openai()
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


@functools.cache
def _client(base_url: str, api_key: str, timeout: float, pid: int) -> openai.OpenAI:
    """One client per endpoint and process, kept: its connection pool keeps the connections
    (and their TLS sessions) open from one step to the next, where a client per step paid a
    handshake and ~20 ms of loading certificates each time. `pid`: a process forked from one
    that made a client makes its own, never sharing the parent's sockets."""
    # Imported here: the client library takes about a second to import, which every process
    # (web, worker, beat, manage.py) paid at startup for a model only some use.
    import openai

    return openai.OpenAI(
        base_url=base_url,
        # Local servers (Ollama, vLLM) need no key, but the client refuses to start without one.
        api_key=api_key or "unused",
        timeout=timeout,
        # Retries belong to the step executor, which checkpoints and backs off between them.
        max_retries=0,
    )


def _openai() -> ModuleType:
    """The client library, imported by OpenAIChatModel() already (a lookup in sys.modules)."""
    import openai

    return openai


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


@dataclass(frozen=True)
class Script:
    """What the scripted model says (LLM_SCRIPT names one): its rules and its default reply."""

    rules: Sequence[Rule]
    default: Reply = "OK."


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
                "prompt_tokens": sum(len(message_text(m.get("content")).split()) for m in messages),
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
            return message_text(message.get("content"))
    return ""


def last_user(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def message_text(content: Any) -> str:
    if isinstance(content, list):
        # Multi-part content: only the text parts can match.
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


# --- choosing a model from settings ---------------------------------------------------------------


def get_model() -> ChatModel:
    """The chat model the settings ask for."""
    provider = getattr(settings, "LLM_PROVIDER", "scripted")
    if provider == "scripted":
        delay = float(getattr(settings, "LLM_SCRIPTED_DELAY_SECONDS", 0.0))
        # The script is the installation's (by default the demo refund desk's,
        # agents/demo/scripted_desk.py): named by a setting, as agent modules are.
        script: Script = import_string(str(settings.LLM_SCRIPT))
        return ScriptedModel(script.rules, default=script.default, delay_seconds=delay)
    if provider == "openai":
        return OpenAIChatModel(
            base_url=getattr(settings, "LLM_BASE_URL", "http://127.0.0.1:11434/v1"),
            api_key=getattr(settings, "LLM_API_KEY", ""),
            model=getattr(settings, "LLM_MODEL", "gpt-4o-mini"),
            timeout=float(getattr(settings, "LLM_TIMEOUT_SECONDS", 60.0)),
        )
    raise ImproperlyConfigured(f"LLM_PROVIDER must be 'scripted' or 'openai', not {provider!r}")
