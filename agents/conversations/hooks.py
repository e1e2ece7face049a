"""What conversations registers with the runtime: `ctx.pack(...)` for steps, and keeping the
hot session cache and rolling summaries up to date as messages are appended."""

from __future__ import annotations

import functools
from typing import Any

from django.db import transaction

from agents.conversations import cache, tasks
from agents.conversations.packing.steps import pack_for_step
from agents.conversations.summary import needs_summary
from agents.runtime import extensions


def _messages_appended(
    sender: Any,
    *,
    tenant_id: Any,
    session_id: Any,
    messages: list[dict[str, Any]],
    count: int,
    summary_upto: int,
    **_: Any,
) -> None:
    """Once the messages are committed: extend the hot session cache, and ask for a summary
    when the thread may have outgrown the turns kept verbatim."""

    def after_commit() -> None:
        cache.messages_appended(tenant_id=tenant_id, session_id=session_id, messages=messages)
        if needs_summary(count=count, summary_upto=summary_upto):
            tasks.enqueue_summary(tenant_id=tenant_id, session_id=session_id)

    transaction.on_commit(after_commit)


def register() -> None:
    extensions.register_step_extension("pack", lambda ctx: functools.partial(pack_for_step, ctx))
    extensions.messages_appended.connect(
        _messages_appended, dispatch_uid="conversations.messages_appended"
    )
