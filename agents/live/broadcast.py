"""Fan progress events out to websocket consumers through the channel layer.

`broadcast(event)` is a `agents.progress` subscriber, so it runs after the commit. It only
queues the event: one sender thread per process, with its own event loop (and so its own
Redis connections), sends them in order. The engine thread never waits for Redis, and a
Redis hiccup loses at most a live message: pages read what they missed from agents_runevent
on the next event or reconnect.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from typing import Any

logger = logging.getLogger(__name__)

MESSAGE_TYPE = "live.event"  # handled by LiveConsumer.live_event
MIN_INTERVAL = 0.01  # seconds between two batches of one process's sender
MAX_CONCURRENT_SENDS = 16  # group_send calls in flight at once (each takes a Redis connection)
# Sent to the tenant's feeds (runs list, approvals) as well as the run's own group.
TENANT_KINDS = frozenset(
    {
        "run.queued",
        "run.status",
        "step.started",
        "step.finished",
        "step.failed",
        "approval.requested",
        "approval.decided",
        "approval.escalated",
    }
)
# What a consumer needs from an event; it reads everything else from the database.
FIELDS = ("tenant_id", "run_id", "kind", "seq", "after", "status", "request_id", "text", "ok")


def run_group(run_id: Any) -> str:
    return f"run.{run_id}"


def tenant_group(tenant_id: Any) -> str:
    return f"tenant.{tenant_id}"


def groups_for(event: dict[str, Any]) -> list[str]:
    if not event.get("run_id"):
        return []
    groups = [run_group(event["run_id"])]
    # A step that hands over to the next one inside the same slice changes no status: the
    # runs list hears of the run when it is claimed, pauses, fails or ends, not every step.
    between_steps = event["kind"] == "step.finished" and event.get("status") == "running"
    if event["kind"] in TENANT_KINDS and not between_steps:
        groups.append(tenant_group(event["tenant_id"]))
    return groups


def broadcast(event: dict[str, Any]) -> None:
    """Queue the event for every group that shows it (called after commit)."""
    groups = groups_for(event)
    if groups:
        message = {"type": MESSAGE_TYPE, **{k: event[k] for k in FIELDS if k in event}}
        _sender().put(groups, message)


class _Sender:
    """Sends the latest message per (group, run): a consumer reads what it missed from the
    database, so when events queue up faster than Redis takes them, only the newest of a
    run needs to go out. The engine thread only stores it in a dict and, if the sender is
    idle, wakes it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.lock = threading.Lock()
        self.pending: dict[tuple[str, str], dict] = {}
        self.waiters: list[threading.Event] = []
        self.wake = asyncio.Event()
        self.last = 0.0
        self.thread = threading.Thread(target=self._run, name="live-broadcast", daemon=True)
        self.thread.start()

    def put(self, groups: list[str], message: dict) -> None:
        with self.lock:
            idle = not self.pending
            for group in groups:
                key = (group, message.get("run_id", ""))
                self.pending.pop(key, None)  # re-inserted last: the newest goes out last
                self.pending[key] = message
        if idle:
            self.loop.call_soon_threadsafe(self.wake.set)

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until everything queued so far is sent (or `timeout` passes)."""
        done = threading.Event()
        with self.lock:
            self.waiters.append(done)
        self.loop.call_soon_threadsafe(self.wake.set)
        return done.wait(timeout)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._pump())

    async def _pump(self) -> None:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        while True:
            await self.wake.wait()
            self.wake.clear()
            # Busy engines would keep this thread sending (and contending for the GIL with
            # the steps); batches at most every MIN_INTERVAL cost a quiet page nothing and
            # let a fast run's events coalesce.
            pause = self.last + MIN_INTERVAL - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            self.last = time.monotonic()
            with self.lock:
                batch, self.pending = self.pending, {}
                waiters, self.waiters = self.waiters, []
            if batch:
                # Bounded: each send holds a Redis connection, and the pool has a ceiling.
                gate = asyncio.Semaphore(MAX_CONCURRENT_SENDS)
                sends = [_send(layer, gate, group, msg) for (group, _), msg in batch.items()]
                results = await asyncio.gather(*sends, return_exceptions=True)
                for result in results:
                    if isinstance(result, BaseException):  # pages catch up from the database
                        logger.warning("live event not sent: %r", result)
            for done in waiters:
                done.set()
            with self.lock:
                if self.pending or self.waiters:
                    self.wake.set()


async def _send(layer: Any, gate: asyncio.Semaphore, group: str, message: dict) -> None:
    async with gate:
        await layer.group_send(group, message)


_lock = threading.Lock()
_current: _Sender | None = None


def _sender() -> _Sender:
    global _current
    sender = _current
    if sender is None or sender.pid != os.getpid():  # first use, or a forked worker process
        with _lock:
            if _current is None or _current.pid != os.getpid():
                _current = _Sender()
            sender = _current
    return sender


def flush(timeout: float = 2.0) -> bool:
    """Send what is queued before the process exits (or a test looks)."""
    return _current.flush(timeout) if _current is not None and _current.pid == os.getpid() else True


atexit.register(flush)
