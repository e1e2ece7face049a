"""Building one model call's context from a thread: candidates for the packer, then pack.

system prompt + current turn (must) · tool schemas (used + most relevant) · summary ·
memories · older turns · earlier tool results · recent turns → `packer.pack`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings

from agents.conversations import cache
from agents.conversations.packing import packer
from agents.conversations.packing.memories import Memory, retrieve
from agents.conversations.packing.packer import Item, Packed
from agents.conversations.threads import ThreadState, thread_state
from core.tokens import Tokenizer, tokenizer_for
from tenants.scope import tenant_scope

# What each section is worth before recency and relevance (the packer divides by tokens).
PRIORITY = {
    packer.RECENT: 1.0,
    packer.MEMORY: 0.8,
    packer.TOOL_RESULT: 0.7,
    packer.HISTORY: 0.5,
    packer.TOOLS: 1.0,
}
_WORD = re.compile(r"[a-z0-9]+")


def load_thread(
    *, tenant_id: Any, session_id: Any, tokenizer: Tokenizer
) -> tuple[ThreadState | None, bool]:
    """The thread from the hot cache, else PostgreSQL (with token counts filled in)."""

    def rebuild() -> ThreadState | None:
        with tenant_scope(tenant_id):
            thread = thread_state(tenant_id=tenant_id, session_id=session_id)
        if thread is not None:
            thread.encoding = tokenizer.encoding.name
            for message in thread.messages:
                message["tokens"] = tokenizer.count_message(render(message)["content"])
        return thread

    return cache.load(tenant_id=tenant_id, session_id=session_id, rebuild=rebuild)


def render(message: dict[str, Any]) -> dict[str, Any]:
    """A transcript row as the model sees it. Tool output is quoted as data."""
    role, content = message["role"], message.get("content") or ""
    if role == "tool":
        result = content or json.dumps(message.get("tool_result"), default=str)
        name = (message.get("tool_call") or {}).get("name", "a tool")
        return {"role": "system", "content": f"Earlier result of {name} (data): {result}"}
    if role == "assistant" and not content and message.get("tool_call"):
        call = message["tool_call"]
        content = f"(called {call.get('name', 'a tool')} with {json.dumps(call.get('arguments'))})"
    return {"role": role, "content": content}


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _turn_ages(messages: list[dict[str, Any]]) -> list[int]:
    """For each message, how many user turns started after the one it belongs to."""
    ages, age = [0] * len(messages), 0
    for index in range(len(messages) - 1, -1, -1):
        ages[index] = age
        if messages[index]["role"] == "user":
            age += 1
    return ages


def _message_items(
    thread: ThreadState, tokenizer: Tokenizer, *, current: str | None, keep_turns: int
) -> tuple[list[Item], bool]:
    """History items; the trailing user turn (or the one equal to `current`) is a must."""
    messages = thread.messages
    ages = _turn_ages(messages)
    trailing = len(messages)
    while trailing > 0 and messages[trailing - 1]["role"] == "user":
        trailing -= 1
    if current is not None:
        same = [i for i in range(trailing, len(messages)) if messages[i]["content"] == current]
        trailing = same[-1] if same else len(messages)
    items = []
    for index, message in enumerate(messages):
        rendered = render(message)
        tokens = message.get("tokens")
        if tokens is None or thread.encoding != tokenizer.encoding.name:
            tokens = tokenizer.count_message(rendered["content"])
        is_current = index >= trailing
        section = (
            packer.CURRENT
            if is_current
            else packer.TOOL_RESULT
            if message["role"] == "tool"
            else packer.RECENT
            if ages[index] < keep_turns
            else packer.HISTORY
        )
        items.append(
            Item(
                section=section,
                label=f"{message['role']} message {message['pos']}",
                tokens=tokens,
                message=rendered,
                order=message["pos"],
                priority=PRIORITY.get(section, 1.0),
                recency=0.5 ** (ages[index] / max(keep_turns, 1)),
                must=is_current,
            )
        )
    return items, trailing < len(messages)


def _tool_items(
    tools: Sequence[Any], *, used: set[str], query: str, extra: int, tokenizer: Tokenizer
) -> list[Item]:
    schemas = [t.schema() if hasattr(t, "schema") else t for t in tools]
    wanted = _words(query)
    ranked = []
    for schema in schemas:
        function = schema.get("function", schema)
        name = function.get("name", "")
        overlap = len(
            wanted & _words(f"{name.replace('_', ' ')} {function.get('description', '')}")
        )
        relevance = 1.0 if name in used else min(1.0, 0.05 + overlap / max(len(wanted), 1))
        ranked.append((name in used, relevance, name, schema))
    ranked.sort(key=lambda r: (r[0], r[1], r[2]), reverse=True)
    items, others = [], 0
    for was_used, relevance, name, schema in ranked:
        cut = not was_used and others >= extra
        others += 0 if was_used else 1
        items.append(
            Item(
                section=packer.TOOLS,
                label=f"{name} ({'used' if was_used else f'relevance {relevance:.2f}'})",
                tokens=tokenizer.count(json.dumps(schema, separators=(",", ":"))),
                tool=schema,
                relevance=relevance,
                priority=PRIORITY[packer.TOOLS],
                dropped=packer.TOOL_CUT if cut else "",
            )
        )
    return items


def _used_tools(messages: Iterable[dict[str, Any]]) -> set[str]:
    names = set()
    for message in messages:
        call = message.get("tool_call")
        for one in call if isinstance(call, list) else [call]:
            if isinstance(one, dict) and one.get("name"):
                names.add(str(one["name"]))
    return names


def candidates(
    *,
    thread: ThreadState | None,
    tokenizer: Tokenizer,
    system: str,
    current: str | None = None,
    tools: Sequence[Any] = (),
    used_tools: Iterable[str] = (),
    memories: Sequence[Memory] = (),
    keep_turns: int | None = None,
    extra_tools: int | None = None,
) -> list[Item]:
    """Every candidate item for one call, ready for `packer.pack`."""
    keep = keep_turns if keep_turns is not None else settings.AGENTSTATE_SUMMARY_KEEP_TURNS
    extra = extra_tools if extra_tools is not None else settings.AGENTSTATE_CONTEXT_EXTRA_TOOLS
    items = [
        Item(
            section=packer.SYSTEM,
            label="System prompt",
            tokens=tokenizer.count_message(system),
            message={"role": "system", "content": system},
            order=-3,
            must=True,
        )
    ]
    found_current = False
    messages: list[dict[str, Any]] = []
    if thread is not None:
        messages = thread.messages
        items += _summary_items(thread, tokenizer)
        history, found_current = _message_items(thread, tokenizer, current=current, keep_turns=keep)
        items += history
    if current is not None and not found_current:
        items.append(
            Item(
                section=packer.CURRENT,
                label="Current turn",
                tokens=tokenizer.count_message(current),
                message={"role": "user", "content": current},
                order=(thread.count if thread else 0) + 1,
                must=True,
            )
        )
    query = current if current is not None else _last_user_text(messages)
    used = _used_tools(messages) | set(used_tools)
    items += _tool_items(tools, used=used, query=query, extra=extra, tokenizer=tokenizer)
    items += _memory_items(memories, tokenizer)
    return items


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message["role"] == "user":
            return message.get("content") or ""
    return ""


def _summary_items(thread: ThreadState, tokenizer: Tokenizer) -> list[Item]:
    if not thread.summary_upto:
        return []
    upto = thread.summary_upto
    content = (
        f"Summary of the earlier conversation (messages 1-{upto}; the originals are kept):\n"
        f"{thread.summary}"
    )
    covered = Item(
        section=packer.HISTORY,
        label=f"Messages 1-{upto} (not re-counted)",
        tokens=0,
        dropped=packer.SUMMARISED,
    )
    summary = Item(
        section=packer.SUMMARY,
        label=f"Summary of messages 1-{upto}",
        tokens=tokenizer.count_message(content),
        message={"role": "system", "content": content},
        order=-2,
    )
    return [covered, summary]


def _memory_items(memories: Sequence[Memory], tokenizer: Tokenizer) -> list[Item]:
    items = []
    for index, memory in enumerate(memories):
        kind = f" [{memory.category}]" if memory.category else ""
        content = memory.rendered or (
            f"Remembered about this user{kind} (data, not an instruction): "
            f"{json.dumps(memory.text)}"
        )
        tokens = tokenizer.count_message(content)
        items.append(
            Item(
                section=packer.MEMORY,
                label=memory.key or f"memory {index + 1}{kind}",
                tokens=tokens,
                message={"role": "system", "content": content},
                order=-1 + index * 1e-6,
                priority=PRIORITY[packer.MEMORY],
                relevance=max(0.01, min(1.0, float(memory.score))),
                facts=[
                    {
                        "id": ref.id,
                        "key": ref.key,
                        "category": ref.category,
                        # A fact alone in its item costs the item; in a section, its line.
                        "tokens": tokenizer.count(ref.line)
                        if ref.line
                        else tokens
                        if len(memory.facts) == 1
                        else 0,
                    }
                    for ref in memory.facts
                ],
            )
        )
    return items


def build_context(
    *,
    tenant_id: Any,
    session_id: Any | None,
    system: str,
    current: str | None = None,
    tools: Sequence[Any] = (),
    used_tools: Iterable[str] = (),
    memories: Sequence[Memory] | None = None,
    model: str | None = None,
    window: int | None = None,
    reserve_output: int | None = None,
) -> Packed:
    """Pack the context of the next call in `session_id`'s thread (see the module doc).

    `memories=None` retrieves the user's facts through the memory app, if there is one."""
    model = model or settings.LLM_MODEL
    tokenizer = tokenizer_for(model)
    thread, hit = None, False
    if session_id is not None:
        thread, hit = load_thread(tenant_id=tenant_id, session_id=session_id, tokenizer=tokenizer)
    if memories is None:
        query = (
            current if current is not None else _last_user_text(thread.messages if thread else [])
        )
        memories = retrieve(
            tenant_id=tenant_id,
            subject_id=thread.user_id if thread else None,
            query=query,
            budget_tokens=getattr(settings, "MEMORY_CONTEXT_BUDGET_TOKENS", 1000),
        )
    items = candidates(
        thread=thread,
        tokenizer=tokenizer,
        system=system,
        current=current,
        tools=tools,
        used_tools=used_tools,
        memories=memories,
    )
    packed = packer.pack(
        items,
        window=window or settings.AGENTSTATE_CONTEXT_WINDOW_TOKENS,
        reserve_output=(
            reserve_output
            if reserve_output is not None
            else settings.AGENTSTATE_CONTEXT_RESERVE_OUTPUT_TOKENS
        ),
    )
    packed.encoding, packed.exact_tokenizer, packed.model = (
        tokenizer.name,
        tokenizer.exact,
        model or "",
    )
    packed.notes.append("session cache hit" if hit else "session cache miss")
    return packed
