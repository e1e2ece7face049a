"""The rolling summary: past `AGENTSTATE_SUMMARY_KEEP_TURNS` turns (10), the older turns of a
thread are folded into its summary by the LLM, off the request path (a Celery task).

The summary keeps decisions, constraints, exact numbers the user gave and open tasks; the
original messages stay for audit. Summarising is idempotent: the fold point is derived from
the thread, and the summary is written with a compare-and-set on the old fold point, so a
repeated or concurrent task changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents.conversations import cache
from agents.conversations.threads import thread_state
from agents.runtime.llm import ChatModel, ScriptedModel, get_model
from agents.runtime.models import AgentSession
from tenants.scope import tenant_scope

INSTRUCTIONS = (
    "You maintain the running summary of a conversation between a user and an assistant. "
    "Fold the new messages into the previous summary. Keep every decision made, every "
    "constraint or preference stated, every exact number, amount, date and identifier the "
    "user gave (verbatim), and every open task or unanswered question. Drop pleasantries. "
    "Write plain sentences or bullet points, no preamble."
)
_NUMBER = re.compile(r"[$€£]?\d[\d,]*(?:\.\d+)?%?|\b[A-Z]{1,4}-\d+\b")


def fold_point(messages: list[dict[str, Any]], *, keep_turns: int) -> int | None:
    """Position up to which to summarise (all but the last `keep_turns` turns), or None."""
    starts = [m["pos"] for m in messages if m["role"] == "user"]
    if len(starts) <= keep_turns:
        return None
    return starts[-keep_turns] - 1 if keep_turns > 0 else messages[-1]["pos"]


def prompt(previous: str, messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    lines = "\n".join(
        f"{m['role']}: {m['content'] or m.get('tool_result') or ''}" for m in messages
    )
    return [
        {"role": "system", "content": INSTRUCTIONS},
        {
            "role": "user",
            "content": f"Previous summary:\n{previous or '(none)'}\n\nNew messages:\n{lines}",
        },
    ]


def keep_numbers(summary: str, messages: list[dict[str, Any]]) -> str:
    """Append, verbatim, any number the user gave that the model's summary lost."""
    given = []
    for message in messages:
        if message["role"] == "user":
            given += [n for n in _NUMBER.findall(message["content"] or "") if n not in given]
    missing = [n for n in given if n not in summary]
    if not missing:
        return summary.strip()
    return f"{summary.strip()}\nNumbers the user gave: {', '.join(missing)}".strip()


def session_summarise(*, tenant_id: Any, session_id: Any, model: ChatModel | None = None) -> bool:
    """Fold the thread's older turns into its summary; False when there is nothing to do."""
    keep = settings.AGENTSTATE_SUMMARY_KEEP_TURNS
    with tenant_scope(tenant_id):
        thread = thread_state(tenant_id=tenant_id, session_id=session_id)
    if thread is None:
        return False
    upto = fold_point(thread.messages, keep_turns=keep)
    if upto is None or upto <= thread.summary_upto:
        return False
    folded = [m for m in thread.messages if m["pos"] <= upto]
    # The model is called outside any transaction: no row is locked while it thinks.
    reply = (model or summary_model()).chat(prompt(thread.summary, folded))
    text = keep_numbers(reply.content, folded)
    with tenant_scope(tenant_id):
        written = (
            AgentSession.objects.for_tenant(tenant_id)
            .filter(pk=session_id, summary_upto=thread.summary_upto)
            .update(summary=text, summary_upto=upto, summary_updated_at=timezone.now())
        )
        if written:
            transaction.on_commit(
                lambda: cache.invalidate(tenant_id=tenant_id, session_id=session_id)
            )
    return bool(written)


def needs_summary(*, count: int, summary_upto: int) -> bool:
    """A cheap necessary condition, from the session row alone, for scheduling the task."""
    return count - summary_upto > settings.AGENTSTATE_SUMMARY_KEEP_TURNS


def summary_model() -> ChatModel:
    """The configured model; with the scripted provider, a deterministic extractive one."""
    if getattr(settings, "LLM_PROVIDER", "scripted") == "scripted":
        return ScriptedModel([], default=extractive_summary)
    return get_model()


_KEEP = re.compile(
    r"\d|decid|agree|approv|reject|refund|must|never|always|only|don't|do not|prefer|"
    r"budget|deadline|todo|to do|will|need|please|\?",
    re.I,
)


def extractive_summary(messages: list[dict[str, Any]]) -> str:
    """Scripted summariser: the previous summary plus every line worth keeping, verbatim."""
    text = messages[-1]["content"]
    previous, _, new = text.partition("\n\nNew messages:\n")
    previous = previous.removeprefix("Previous summary:\n")
    kept = [line for line in new.splitlines() if _KEEP.search(line)]
    parts = [] if previous == "(none)" else [previous]
    return "\n".join(parts + [f"- {line}" for line in kept]) or "- (nothing to keep)"
