"""Threads: a conversation forked at a message sees its parent's messages up to there, then
its own. Nothing is copied: reading a thread walks the parent chain in one query.

A thread's messages are numbered by *position*: a fork's inherited messages come first
(`inherited_messages` of them), so own message `seq` sits at `inherited_messages + seq`.
The inherited prefix never changes (transcripts are append-only), so a position is stable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import connection

from core import sql

_CHAIN = sql.load("agents.conversations", "thread_chain")
MESSAGES_SQL = _CHAIN + sql.load("agents.conversations", "thread_messages")
SESSION_SQL = sql.load("agents.conversations", "thread_state")
ANCESTORS_SQL = _CHAIN + sql.load("agents.conversations", "thread_ancestors")


@dataclass
class ThreadState:
    """What building a context needs of a thread: its summary and the messages after it."""

    session_id: str
    summary: str
    summary_upto: int
    count: int  # messages in the thread, inherited ones included
    ttl: int  # seconds the hot cache keeps it (the tenant's setting)
    messages: list[dict[str, Any]]  # positions summary_upto+1 .. count, oldest first
    encoding: str = ""  # the tokenizer the messages' "tokens" were counted with
    user_id: int | None = None  # whom the conversation is with (memories are about them)

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "summary": self.summary,
            "summary_upto": self.summary_upto,
            "count": self.count,
            "ttl": self.ttl,
            "encoding": self.encoding,
            "user_id": self.user_id,
        }


def _json(value: Any) -> Any:
    # Django's psycopg setup hands jsonb to raw cursors as text.
    return json.loads(value) if isinstance(value, str) else value


def thread_messages(*, tenant_id: Any, session_id: Any, after: int = 0) -> list[dict[str, Any]]:
    """Messages of the thread after position `after`, oldest first (call in a tenant context)."""
    params: dict[str, Any] = {"tenant": str(tenant_id), "session": str(session_id), "after": after}
    with connection.cursor() as cursor:
        cursor.execute(MESSAGES_SQL, params)
        rows = cursor.fetchall()
    return [
        {
            "pos": pos,
            "session": str(session),
            "seq": seq,
            "role": role,
            "content": content,
            "tool_call": _json(call),
            "tool_result": _json(result),
            "tokens": None,
        }
        for pos, session, seq, role, content, call, result in rows
    ]


def thread_state(*, tenant_id: Any, session_id: Any) -> ThreadState | None:
    """The thread as stored in PostgreSQL, or None if there is no such session here."""
    params = {"tenant": str(tenant_id), "session": str(session_id)}
    with connection.cursor() as cursor:
        cursor.execute(SESSION_SQL, params)
        row = cursor.fetchone()
    if row is None:
        return None
    summary, summary_upto, inherited, last_seq, user_id, ttl = row
    return ThreadState(
        session_id=str(session_id),
        summary=summary,
        summary_upto=summary_upto,
        count=inherited + last_seq,
        ttl=ttl,
        user_id=user_id,
        messages=thread_messages(tenant_id=tenant_id, session_id=session_id, after=summary_upto),
    )


def ancestors(*, tenant_id: Any, session_id: Any) -> list[tuple[str, int | None]]:
    """(session id, seq it is seen up to) from the root down to the session itself."""
    params = {"tenant": str(tenant_id), "session": str(session_id)}
    with connection.cursor() as cursor:
        cursor.execute(ANCESTORS_SQL, params)
        return [(str(pk), upto) for pk, upto, _ in cursor.fetchall()]
