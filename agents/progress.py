"""Progress events, published after the write they describe has committed.

Subscribers (live progress over websockets, metrics) register with `subscribe()`. A
subscriber that fails is logged and never breaks the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)
Subscriber = Callable[[dict[str, Any]], None]
_subscribers: list[Subscriber] = []


def subscribe(fn: Subscriber) -> Subscriber:
    _subscribers.append(fn)
    return fn


def publish(*, tenant_id: Any, run_id: Any, kind: str, **data: Any) -> None:
    """Send `kind` for the run once the current transaction commits (at once if none)."""
    event = {"tenant_id": str(tenant_id), "run_id": str(run_id), "kind": kind, **data}

    def send() -> None:
        for fn in list(_subscribers):
            try:
                fn(event)
            except Exception:  # noqa: BLE001
                logger.exception("progress subscriber %r failed", fn)

    transaction.on_commit(send)
