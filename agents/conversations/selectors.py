"""Reads of conversations: a thread as its reader sees it (inherited turns included)."""

from __future__ import annotations

from typing import Any

from agents.conversations.threads import ancestors, thread_messages
from agents.runtime.models import AgentSession


def thread_ancestors(session: AgentSession) -> list[dict[str, Any]]:
    """The sessions a thread reads, root first: each with the seq it is seen up to."""
    chain = ancestors(tenant_id=session.tenant_id, session_id=session.pk)
    found = AgentSession.objects.for_tenant(session.tenant_id).filter(
        pk__in=[pk for pk, _ in chain]
    )
    rows = {str(s.pk): s for s in found.select_related("user")}
    return [{"session": rows[pk], "upto": upto} for pk, upto in chain if pk in rows]


def thread(session: AgentSession) -> list[dict[str, Any]]:
    """Every message of the thread, oldest first, inherited ones marked (position, origin)."""
    messages = thread_messages(tenant_id=session.tenant_id, session_id=session.pk)
    for message in messages:
        message["inherited"] = message["session"] != str(session.pk)
    return messages
