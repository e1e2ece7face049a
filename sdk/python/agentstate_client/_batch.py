"""Group the saver's calls into as few requests as durability allows.

A graph's step makes two calls: `put_writes` (a task's writes, for the checkpoint it ran
from) and then `put` (the next checkpoint). Calls made close together travel together: a
sender takes the calls queued so far and sends them, in order, as one `POST langgraph/steps`,
applied in one transaction. Writes alone wait a moment (`linger`, counted from when they
were queued or the last request came back, whichever is later: a checkpoint waits for the one
before it) for the checkpoint that usually follows; when none comes (an interrupt, an error,
a task whose siblings still run) they go alone once it has passed. A checkpoint never waits.

A call returns once the server has committed it, except an `early` one (the saver's
checkpoints between steps with durability "async", which LangGraph saves in the background
while the next step runs): it returns once queued, and a sender of its own sends it (with
whatever queued behind it meanwhile, in one request). Requests go one at a time, in the
order of the calls, so any call that waits for its commit (a task's writes, the checkpoint
at the graph's end or interrupt, a read) also waits for every early call before it; an early
call's failure is raised by the next call.
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
        # done: the future its caller waits on; None for an early call (nobody waits)
        self.op, self.size, self.at, self.done = op, size, time.monotonic(), done

    def settle(self, exc: BaseException | None) -> None:
        if self.done is not None and not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)


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
    """The calls of the next request (at least one), removed from the queue. Behind early
    calls (a graph running ahead), every call queued, in order. Otherwise the oldest
    checkpoint with the writes queued before it, but not the writes of checkpoints that are not
    saved yet (they wait for theirs, so each request stays one step, which the server saves in
    one statement). Without a checkpoint queued, the oldest calls."""
    put_at = next((i for i, item in enumerate(queue) if item.op["op"] == "put"), None)
    if any(item.done is None for item in queue) or put_at is None:
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


def _after_failure(queue: list[_Item]) -> list[_Item]:
    """Every call queued behind an early call that failed, removed from the queue: none of
    them is sent (a checkpoint saved after one that is missing would leave a gap); they fail
    with it."""
    behind = queue[:]
    queue.clear()
    return behind


def _has_put(queue: list[_Item]) -> bool:
    return any(item.op["op"] == "put" for item in queue)


class Sender:
    """The sync side: a caller whose call is queued and who finds nobody sending sends the
    queue itself (a checkpoint at once, writes after the linger), and the others wait for their
    answer. The checkpoint that a graph waits for is usually sent by the very thread that waits
    for it: no hand-over on the step's path. Early calls are sent by a thread of the sender's
    own, started at the first."""

    def __init__(self, send: Callable[[list[dict[str, Any]]], Any], linger: float) -> None:
        self._send = send
        self._linger = linger
        self._cond = threading.Condition()
        self._queue: list[_Item] = []
        self._sending = False
        self._closed = False
        self._back = 0.0  # when the last request came back
        self._saved = _Saved()
        self._failed: BaseException | None = None  # an early call's error, for the next call
        self._thread: threading.Thread | None = None

    def call(self, op: dict[str, Any], size: int, *, early: bool = False) -> None:
        """Queue `op` and return once the server has committed it (or raise its error); an
        `early` call returns once queued."""
        item = _Item(op, size, None if early else Future())
        with self._cond:
            if self._closed:
                raise RuntimeError("the saver is closed")
            self._raise_failed()
            self._queue.append(item)
            self._cond.notify_all()
            if early:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._send_early, name="agentstate-saver", daemon=True
                    )
                    self._thread.start()
                return
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

    def flush(self) -> None:
        """Wait until every call queued so far is committed (raising an early call's error)."""
        with self._cond:
            while any(item.done is None for item in self._queue) or self._sending:
                self._cond.wait()
            self._raise_failed()

    def _raise_failed(self) -> None:
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

    def _send_early(self) -> None:
        with self._cond:
            while True:
                if self._sending or not any(item.done is None for item in self._queue):
                    self._cond.wait()
                    continue
                self._send_queued()

    def _send_queued(self) -> None:
        # Called holding the lock; sends without it.
        batch = _take(self._queue, self._saved)
        self._sending = True
        self._cond.release()
        failed: BaseException | None = None
        try:
            self._send([item.op for item in batch])
        except BaseException as exc:  # noqa: BLE001 - each waiting call gets it
            failed = exc
        else:
            self._saved.add(batch)
        finally:
            self._cond.acquire()
            if failed is not None and any(item.done is None for item in batch):
                batch += _after_failure(self._queue)
                self._failed = failed
            for item in batch:
                item.settle(failed)
            self._sending = False
            self._back = time.monotonic()
            self._cond.notify_all()

    def close(self) -> None:
        """Send what is queued early, then refuse new calls (those queued otherwise are sent
        by their callers)."""
        try:
            self.flush()
        finally:
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
        self._failed: BaseException | None = None  # an early call's error, for the next call

    async def call(self, op: dict[str, Any], size: int, *, early: bool = False) -> None:
        """As Sender.call, on the running loop."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop, self._queue, self._wake, self._task = loop, [], asyncio.Event(), None
        self._raise_failed()
        done = None if early else loop.create_future()
        self._queue.append(_Item(op, size, done))
        assert self._wake is not None
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        if done is not None:
            await done

    async def drain(self) -> None:
        """Wait until what is queued on this loop has been sent (raising an early call's
        error)."""
        task = self._task
        if task is not None and self._loop is asyncio.get_running_loop() and not task.done():
            await asyncio.shield(task)
        self._raise_failed()

    def _raise_failed(self) -> None:
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

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
                if any(item.done is None for item in batch):
                    batch += _after_failure(self._queue)
                    self._failed = exc
                for item in batch:
                    item.settle(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
            else:
                self._saved.add(batch)
                for item in batch:
                    item.settle(None)
            finally:
                self._back = time.monotonic()
