"""One process's live sockets share the work of an event.

A committed event reaches every socket of the process that follows its run or its tenant
(the pub/sub channel layer delivers it once per process, then to each local consumer). Each
socket used to read the run's new events and the run, decide whether it may see them and
render them on its own, one after another on the one thread Django's database calls run on:
7.5 ms a socket, 7 s for 1,000. Now the sockets that see the same thing ask once:

- a **viewer class** is what decides what a socket may see and how it is written: the
  tenant, the role and its scopes, and for an end user (who sees only their own runs) the
  user. Sockets of one class see exactly the same rows, rendered the same way.
- `shared(key, make)` runs `make()` once for any number of sockets asking for the same key
  at once (the first one asks; the others await its answer, no thread hop of their own),
  and, for an answer about one event (a runs-list row), keeps it for a moment for those that
  ask a little later. A run page's catch-up ("what is new since event n") is never kept: a
  page that asks again from n later (it re-subscribed after a swap) must see what committed
  meanwhile. A failure (a refusal, an outage) reaches every one of them, as it would have
  reached each alone.

What is personal stays per socket: the run page's context record (what a remembered fact
says is shown only to whoever may read that person's memories) and the server clock each
page's timers get.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from tenants.principal import Principal

T = TypeVar("T")
KEEP_SECONDS = 2.0  # how long an answer serves sockets that ask a little later
KEEP_ANSWERS = 512


def viewer_class(principal: Principal) -> tuple[Any, ...]:
    """What decides what a socket may see and how it reads: sockets with the same class see
    the same rows, in the same words."""
    own = getattr(principal.user, "pk", None) if principal.sees_only_own else None
    return (str(principal.tenant.pk), principal.role, tuple(sorted(principal.scopes)), own)


class SharedWork:
    """Answers computed once per key for the sockets of this process (one event loop)."""

    def __init__(self, keep_seconds: float = KEEP_SECONDS, keep: int = KEEP_ANSWERS) -> None:
        self.keep_seconds, self.most = keep_seconds, keep
        self.running: dict[Hashable, asyncio.Future[Any]] = {}
        self.answers: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    async def shared(
        self, key: Hashable, make: Callable[[], Awaitable[T]], *, keep: bool = True
    ) -> T:
        """`make()`'s answer for `key`: shared with whoever asks while it runs, and (`keep`)
        with whoever asks within `keep_seconds` after. Keep only answers that are the same
        whenever they are asked for (a key naming one event); an answer about "what is new
        since" goes stale the moment something newer commits."""
        kept = self.answers.get(key) if keep else None
        if kept is not None and time.monotonic() - kept[0] < self.keep_seconds:
            return kept[1]
        running = self.running.get(key)
        if running is not None:
            # shield: one waiter's socket closing must not cancel the others' answer
            return await asyncio.shield(running)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.running[key] = future
        try:
            answer = await make()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else waiting is not an error
            raise
        finally:
            del self.running[key]
        future.set_result(answer)
        if keep:
            self.answers[key] = (time.monotonic(), answer)
            self.answers.move_to_end(key)
            while len(self.answers) > self.most:
                self.answers.popitem(last=False)
        return answer

    def forget(self) -> None:
        self.answers.clear()


work = SharedWork()
