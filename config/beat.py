"""Celery beat without a single point of failure: run any number of beat processes with one
of these schedulers (settings.CELERY_BEAT_SCHEDULER); the one holding the `celery-beat` lease
(core/leader.py) sends the schedule, the others wait as standbys and one of them takes over
within AGENTSTATE_BEAT_LEASE_SECONDS of the active one dying. The active one renews the
lease at least every third of its length (beat's own sweeps tick every second anyway)."""

from __future__ import annotations

import logging
from typing import Any

from celery.beat import PersistentScheduler
from django.conf import settings
from django_celery_beat.schedulers import DatabaseScheduler

from core import leader

logger = logging.getLogger(__name__)

LEASE = "celery-beat"


class LeaderOnly:
    """Mixin for a Celery beat scheduler: tick only while holding the lease."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lease_holder = leader.holder_id()
        self.leading: bool | None = None  # not asked yet: the first tick says which
        super().__init__(*args, **kwargs)

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
        try:
            super().close()  # type: ignore[misc]
        finally:
            if self.leading:
                leader.release(LEASE, self.lease_holder)


class LeaderDatabaseScheduler(LeaderOnly, DatabaseScheduler):
    """The schedule in the database (django-celery-beat), sent by the lease's holder."""


class LeaderPersistentScheduler(LeaderOnly, PersistentScheduler):
    """The schedule in a local file (Celery's default), sent by the lease's holder."""
