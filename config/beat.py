"""Celery beat without a single point of failure: run any number of beat processes with one
of these schedulers (settings.CELERY_BEAT_SCHEDULER); the one holding the `celery-beat` lease
(core/leader.py) sends the schedule, the others wait as standbys and one of them takes over
within AGENTSTATE_BEAT_LEASE_SECONDS of the active one dying. The active one renews the
lease at least every third of its length (beat's own sweeps tick every second anyway).

The recovery sweep (`agents.recover_runs`, every second) runs inside the active beat, on a
thread of its own, instead of going through the queue: queued, it waited for a free worker
slot, and with every slot busy on a slice of long steps a dead worker's run waited seconds
more to be taken back (tests/agents/test_recovery.py's chaos mix measured kill -> claimed
again up to 5 s before, 3-4 s after). AGENTSTATE_RECOVERY_IN_BEAT=0 queues it like the rest."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import close_old_connections
from django_celery_beat.schedulers import DatabaseScheduler

from core import leader

logger = logging.getLogger(__name__)

LEASE = "celery-beat"
RUN_HERE = frozenset({"agents.recover_runs"})  # see the module's docstring


def _run_here(task: Any) -> None:
    close_old_connections()  # one dropped by a database restart is made anew
    started = time.monotonic()
    try:
        result = task()
    except Exception:
        logger.exception("%s failed in beat; the next tick runs it again", task.name)
    else:
        logger.info("%s done in beat in %.0f ms: %s", task.name, _ms(started), result)
    finally:
        close_old_connections()


def _ms(since: float) -> float:
    return (time.monotonic() - since) * 1000


class LeaderOnly:
    """Mixin for a Celery beat scheduler: tick only while holding the lease."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lease_holder = leader.holder_id()
        self.leading: bool | None = None  # not asked yet: the first tick says which
        self._here = ThreadPoolExecutor(max_workers=1, thread_name_prefix="beat-sweep")
        self._running: Future | None = None
        super().__init__(*args, **kwargs)

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True, **kwargs: Any):
        if entry.task not in RUN_HERE or not settings.AGENTSTATE_RECOVERY_IN_BEAT:
            return super().apply_async(entry, producer=producer, advance=advance, **kwargs)  # type: ignore[misc]
        if advance:
            entry = self.reserve(entry)  # type: ignore[attr-defined]
        if self._running is None or self._running.done():  # a sweep still going makes this one
            self._running = self._here.submit(_run_here, self.app.tasks[entry.task])  # type: ignore[attr-defined]
        return None

    def tick(self, *args: Any, **kwargs: Any) -> float:
        seconds = settings.AGENTSTATE_BEAT_LEASE_SECONDS
        holds = leader.hold(LEASE, self.lease_holder, seconds)
        if holds != self.leading:
            self.leading = holds
            logger.warning(
                "beat %s: %s",
                self.lease_holder,
                "active (holds the lease); sending the schedule"
                if holds
                else "standby (another beat holds the lease)",
            )
        if not holds:
            return seconds / 3  # a standby looks again a few times per lease
        return min(super().tick(*args, **kwargs), seconds / 3)  # type: ignore[misc]

    def close(self) -> None:
        self._here.shutdown(wait=False)
        try:
            super().close()  # type: ignore[misc]
        finally:
            if self.leading:
                leader.release(LEASE, self.lease_holder)


class LeaderDatabaseScheduler(LeaderOnly, DatabaseScheduler):
    """The schedule in the database (django-celery-beat), sent by the lease's holder."""


class LeaderPersistentScheduler(LeaderOnly, PersistentScheduler):
    """The schedule in a local file (Celery's default), sent by the lease's holder."""
