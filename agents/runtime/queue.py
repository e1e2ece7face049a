"""Sending work to the Celery workers by task name, so that what enqueues (services, the engine,
sweeps, features) need not import the tasks that import it back."""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

import kombu.exceptions
import redis.exceptions
from celery import current_app

from core.redis_client import client

logger = logging.getLogger(__name__)
# What a send raises when the broker is down or restarting.
BROKER_DOWN = (
    kombu.exceptions.OperationalError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    ConnectionError,
    TimeoutError,
)
RUN_STEP = "agents.run_step"
# Celery's Redis transport keeps a list per priority step (0, 3, 6, 9) and workers take from
# the lowest number first. Runs go at NORMAL; a run taken back from a dead worker goes at
# URGENT, ahead of new work, so a backlog does not keep a half-done run waiting. Beat's
# sweeps carry no priority (0): they are quick and keep everything else moving.
URGENT = 0
NORMAL = 3
PRIORITY_STEPS = (0, 3, 6, 9)


def enqueue_run(
    *,
    tenant_id: Any,
    run_id: Any,
    countdown: float | None = None,
    eta: dt.datetime | None = None,
    priority: int = NORMAL,
) -> None:
    """Queue a slice of the run. Duplicates are harmless: only one claim can succeed.

    Called after the run's commit: when the broker does not answer, the run is queued in the
    database all the same, and the recovery sweep sends it once the broker is back
    (AGENTSTATE_REQUEUE_AFTER_SECONDS), so the caller is not told of it (a step is not failed,
    a request is not answered 503 for a run that was created)."""
    try:
        current_app.send_task(
            RUN_STEP,
            kwargs={"tenant_id": str(tenant_id), "run_id": str(run_id)},
            countdown=countdown,
            eta=eta,
            priority=priority,
        )
        if priority == URGENT:
            urgent_runs(+1)
    except BROKER_DOWN as exc:
        logger.warning(
            "run %s is queued in the database but the broker did not answer (%s); "
            "the recovery sweep sends it",
            run_id,
            exc,
        )


def queue_keys(queue: str) -> list[str]:
    """The Redis lists holding `queue`'s messages, one per priority step."""
    return [queue if p == 0 else f"{queue}\x06\x16{p}" for p in PRIORITY_STEPS]


# How many runs taken back from dead workers wait at URGENT: counted up when one is sent,
# down when a worker claims it (engine/runner.py). A worker in a long slice ends it between
# steps while any waits, so they go first, not after every busy worker's slice. (The URGENT
# list itself also holds sweeps and tasks sent without a priority, which need no such haste.)
# The count expires a while after its last change, so a message lost with the broker cannot
# keep slices short for long.
URGENT_RUNS_KEY = "agentstate:urgent-runs"
URGENT_RUNS_TTL_SECONDS = 15


def urgent_runs(change: int) -> None:
    try:
        pipe = client().pipeline(transaction=False)
        pipe.incrby(URGENT_RUNS_KEY, change)
        pipe.expire(URGENT_RUNS_KEY, URGENT_RUNS_TTL_SECONDS)
        left, _ = pipe.execute()
        if int(left) < 0:
            client().set(URGENT_RUNS_KEY, 0, ex=URGENT_RUNS_TTL_SECONDS)
    except redis.exceptions.RedisError:
        pass  # slices then run their length, as before


class _UrgentCheck:
    """Whether a run taken back from a dead worker waits (URGENT_RUNS_KEY): asked of Redis at
    most every `every` seconds per process; False when Redis does not answer."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._at = -every
        self._answer = False

    def __call__(self) -> bool:
        now = time.monotonic()
        if now - self._at >= self.every:
            self._at = now
            try:
                self._answer = int(client().get(URGENT_RUNS_KEY) or 0) > 0
            except redis.exceptions.RedisError:
                self._answer = False
        return self._answer

    def cache_clear(self) -> None:
        self._at, self._answer = -self.every, False


urgent_waiting = _UrgentCheck(every=0.5)
