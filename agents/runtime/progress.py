"""Progress events, published after the write they describe has committed.

An event of a run is durable: it is stored in `agents_runevent` with the run's next number
(`agents_run.event_seq + 1`) in the same transaction as the write it describes, and sent to
subscribers only once that transaction commits. The engine's SQL stores its own events in
the statement that persists a step and passes the number in as `seq`. Live-only events (an
LLM call in progress, its tokens) describe no write; they are sent at once and never stored.

Subscribers (the websocket broadcaster of `agents.live`, metrics) register with
`subscribe()`. A subscriber that fails is logged and never breaks the engine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from django.db import connection, transaction

from core import sql
from tenants.scope import tenant_scope

logger = logging.getLogger(__name__)
Subscriber = Callable[[dict[str, Any]], None]

# Kinds that describe no database write: never stored, never numbered.
LIVE_KINDS = frozenset({"llm.started", "llm.token", "llm.finished"})

RECORD_SQL = sql.load("agents.runtime", "record_event")


# Who hears each event after commit: live websockets (agents.live subscribes when it is
# installed), the step counters of /metrics (agents.runtime.metrics.install()), tests.
_subscribers: list[Subscriber] = []
_recorded = threading.local()


def subscribe(fn: Subscriber) -> Subscriber:
    """Call `fn(event)` for every event after commit (once, however often subscribed)."""
    if fn not in _subscribers:
        _subscribers.append(fn)
    return fn


def unsubscribe(fn: Subscriber) -> None:
    with contextlib.suppress(ValueError):
        _subscribers.remove(fn)


def publish(
    *,
    tenant_id: Any,
    run_id: Any,
    kind: str,
    seq: int | None = None,
    committed: bool = False,
    **data: Any,
) -> int | None:
    """Store `kind` for the run (unless `seq` says it is stored) and send it after commit.
    `committed`: the caller's write (stored as `seq`) has committed, so send it now.

    Returns the event's number, or None for events that are not stored (no run, live-only).
    """
    if run_id and seq is None and kind not in LIVE_KINDS:
        seq = _record(tenant_id=tenant_id, run_id=run_id, kind=kind, data=data)
    event = {"tenant_id": str(tenant_id), "run_id": str(run_id or ""), "kind": kind, **data}
    event["seq"] = seq
    send_stored(event, committed=committed and seq is not None)
    return seq


def send_stored(event: dict[str, Any], *, committed: bool) -> None:
    """Send an event as `publish` builds it, already stored (its "seq" set) or live-only: now
    if its write has committed, else once it does. The engine sends its step events so, with
    the event built in one go, on every step."""
    if committed:
        _send(event)
    else:
        transaction.on_commit(partial(_send, event))


def publish_live(*, tenant_id: Any, run_id: Any, kind: str, after: int, **data: Any) -> None:
    """Send a live-only event now: `after` is the number of the run's latest stored event."""
    _send(
        {"tenant_id": str(tenant_id), "run_id": str(run_id), "kind": kind, "after": after, **data}
    )


@contextlib.contextmanager
def tracking() -> Iterator[dict[str, int]]:
    """Collect the highest number this thread stores per run during the block."""
    seen: dict[str, int] = {}
    _recorded.seqs = seen
    try:
        yield seen
    finally:
        _recorded.seqs = None


def _record(*, tenant_id: Any, run_id: Any, kind: str, data: dict[str, Any]) -> int | None:
    params = {
        "tenant": str(tenant_id),
        "run": str(run_id),
        "kind": kind,
        "data": json.dumps(data, default=str),
    }
    if connection.in_atomic_block:
        row = _execute(params)
    else:
        with tenant_scope(tenant_id):
            row = _execute(params)
    if row is None:
        # The run is not visible in this transaction's tenant context: send it unnumbered,
        # and live pages read what they missed from the database.
        logger.error("event %s of run %s not stored: run not visible", kind, run_id)
        return None
    seen = getattr(_recorded, "seqs", None)
    if seen is not None:
        seen[str(run_id)] = max(seen.get(str(run_id), 0), row[0])
    return int(row[0])


def _execute(params: dict[str, Any]) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(RECORD_SQL, params)
        return cursor.fetchone()


def _send(event: dict[str, Any]) -> None:
    for fn in list(_subscribers):
        try:
            fn(event)
        except Exception:  # noqa: BLE001
            logger.exception("progress subscriber %r failed", fn)
