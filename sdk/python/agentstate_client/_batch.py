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


class _Saved:
    """The ids of the checkpoints this sender has had committed lately (at most KEPT)."""

    KEPT = 4096

    def __init__(self) -> None:
        self._ids: dict[str, None] = {}

    def __contains__(self, checkpoint_id: object) -> bool:
        return checkpoint_id in self._ids

    def add(self, batch: list[_Item]) -> None:
        for item in batch:
            if item.op["op"] == "put":
                self._ids[item.op["checkpoint_id"]] = None
        while len(self._ids) > self.KEPT:
            del self._ids[next(iter(self._ids))]


def _take(queue: list[_Item], saved: _Saved) -> list[_Item]:
    """The calls of the next request (at least one), removed from the queue: the oldest
    checkpoint with the writes queued before it, but not the writes of checkpoints that are not
    saved yet (a graph running ahead, durability "async", queues a later step's writes before
    that step's checkpoint: they wait for it, so each request stays one step). Without a
    checkpoint queued, the oldest calls."""
    put_at = next((i for i, item in enumerate(queue) if item.op["op"] == "put"), None)
    if put_at is None:
        candidates = list(range(len(queue)))
    else:
        parent = queue[put_at].op.get("parent_checkpoint_id")
        candidates = [
            i
            for i in range(put_at)
            if queue[i].op["checkpoint_id"] == parent or queue[i].op["checkpoint_id"] in saved
        ] + [put_at]
    taken: list[int] = []
    size = 0
    for i in candidates:
        if len(taken) >= BATCH_OPS or (taken and size + queue[i].size > BATCH_BYTES):
            break
        taken.append(i)
        size += queue[i].size
    batch = [queue[i] for i in taken]
    for i in reversed(taken):
        del queue[i]
    return batch


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
        self._saved = _Saved()

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
        batch = _take(self._queue, self._saved)
        self._sending = True
        self._cond.release()
        try:
            self._send([item.op for item in batch])
        except BaseException as exc:  # noqa: BLE001 - each waiting call gets it
            for item in batch:
                item.done.set_exception(exc)
        else:
            self._saved.add(batch)
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
        self._saved = _Saved()

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
            batch = _take(self._queue, self._saved)
            try:
                await self._send([item.op for item in batch])
            except BaseException as exc:  # noqa: BLE001 - each waiting call gets it
                for item in batch:
                    if not item.done.done():
                        item.done.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
            else:
                self._saved.add(batch)
                for item in batch:
                    if not item.done.done():
                        item.done.set_result(None)
            finally:
                self._back = time.monotonic()
