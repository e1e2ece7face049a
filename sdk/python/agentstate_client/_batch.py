"""Group the saver's calls into as few requests as durability allows.

A graph's step makes two calls: `put_writes` (a task's writes, for the checkpoint it ran
from) and then `put` (the next checkpoint). Each call still returns only once the server has
committed it; what changes is that calls made close together travel together: a sender
takes every call queued so far and sends them, in order, as one `POST langgraph/steps`,
applied in one transaction. Writes alone wait a moment (`linger`, counted from when they
were queued or the last request came back, whichever is later: a checkpoint waits for the one
before it) for the checkpoint that usually follows; when none comes (an interrupt, an error,
a task whose siblings still run) they go alone once it has passed. A checkpoint never waits.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any

# One request carries at most this much (the server's limit is larger; a single call larger
# than the server's limit gets its 413).
BATCH_BYTES = 8 * 1024 * 1024
BATCH_OPS = 500


class _Item:
    __slots__ = ("op", "size", "at", "done")

    def __init__(self, op: dict[str, Any], size: int, done: Any) -> None:
        self.op, self.size, self.at, self.done = op, size, time.monotonic(), done


def _take(queue: list[_Item]) -> list[_Item]:
    """The oldest calls that fit in one request (at least one), removed from the queue."""
    taken, size = [], 0
    while queue and len(taken) < BATCH_OPS:
        if taken and size + queue[0].size > BATCH_BYTES:
            break
        item = queue.pop(0)
        taken.append(item)
        size += item.size
    return taken


def _has_put(queue: list[_Item]) -> bool:
    return any(item.op["op"] == "put" for item in queue)


class Sender:
    """The sync side, without a thread of its own: a caller whose call is queued and who finds
    nobody sending sends the queue itself (a checkpoint at once, writes after the linger),
    and the others wait for their answer. The checkpoint that a graph waits for is usually
    sent by the very thread that waits for it: no hand-over on the step's path."""

    def __init__(self, send: Callable[[list[dict[str, Any]]], Any], linger: float) -> None:
        self._send = send
        self._linger = linger
        self._cond = threading.Condition()
        self._queue: list[_Item] = []
        self._sending = False
        self._closed = False
        self._back = 0.0  # when the last request came back

    def call(self, op: dict[str, Any], size: int) -> None:
        """Queue `op` and return once the server has committed it (or raise its error)."""
        item = _Item(op, size, Future())
        with self._cond:
            if self._closed:
                raise RuntimeError("the saver is closed")
            self._queue.append(item)
            self._cond.notify_all()
            while not item.done.done():
                if self._sending or item not in self._queue:
                    self._cond.wait()
                    continue
                left = max(self._queue[0].at, self._back) + self._linger - time.monotonic()
                if not _has_put(self._queue) and left > 0:
                    self._cond.wait(left)
                    continue
                self._send_queued()
        item.done.result()

    def _send_queued(self) -> None:
        # Called holding the lock; sends without it.
        batch = _take(self._queue)
        self._sending = True
        self._cond.release()
        try:
            self._send([item.op for item in batch])
        except BaseException as exc:  # noqa: BLE001 - each waiting call gets it
            for item in batch:
                item.done.set_exception(exc)
        else:
            for item in batch:
                item.done.set_result(None)
        finally:
            self._cond.acquire()
            self._sending = False
            self._back = time.monotonic()
            self._cond.notify_all()

    def close(self) -> None:
        """Refuse new calls (those queued are sent by their callers)."""
        with self._cond:
            self._closed = True


class AsyncSender:
    """The async side: a sender task on the running event loop (a new one per loop)."""

    def __init__(
        self, send: Callable[[list[dict[str, Any]]], Awaitable[Any]], linger: float
    ) -> None:
        self._send = send
        self._linger = linger
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: list[_Item] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._back = 0.0

    async def call(self, op: dict[str, Any], size: int) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._queue, self._wake, self._task = loop, [], asyncio.Event(), None
        done = loop.create_future()
        self._queue.append(_Item(op, size, done))
        assert self._wake is not None
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        await done

    async def drain(self) -> None:
        """Wait until what is queued on this loop has been sent."""
        task = self._task
        if task is not None and self._loop is asyncio.get_running_loop() and not task.done():
            await asyncio.shield(task)

    async def _run(self) -> None:
        assert self._wake is not None
        while self._queue:
            deadline = max(self._queue[0].at, self._back) + self._linger
            while not _has_put(self._queue):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except TimeoutError:
                    break
            batch = _take(self._queue)
            try:
                await self._send([item.op for item in batch])
            except BaseException as exc:  # noqa: BLE001 - each waiting call gets it
                for item in batch:
                    if not item.done.done():
                        item.done.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
            else:
                for item in batch:
                    if not item.done.done():
                        item.done.set_result(None)
            finally:
                self._back = time.monotonic()
