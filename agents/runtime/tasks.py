"""Celery tasks of the engine: take ids, call the engine or a sweep, and nothing else."""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError, close_old_connections, connections

from agents.runtime import metrics
from agents.runtime.engine.runner import drive
from config.logging import bind as log_context
from tenants.tasks import TenantTask

logger = logging.getLogger(__name__)
metrics.install()  # step counters for /metrics, sent from whichever process runs steps


class EngineTask(TenantTask):
    abstract = True
    one_transaction = False  # the engine commits once per step, in its own transactions


def _worker_id() -> str:
    # Forked pool processes must not share the parent's identity: the lease names a process.
    return f"{socket.gethostname()}:{os.getpid()}"


@shared_task(
    base=EngineTask,
    bind=True,
    name="agents.run_step",
    max_retries=None,
    acks_late=True,
    reject_on_worker_lost=True,
)
def run_step(self, *, tenant_id: str, run_id: str) -> dict:
    """Drive the run for one time slice; the engine enqueues the next slice itself."""
    try:
        with log_context(tenant_id=tenant_id, run_id=run_id):
            result = drive(tenant_id=tenant_id, run_id=run_id, worker=_worker_id())
    except (OperationalError, InterfaceError) as exc:
        # The database went away mid-step. Drop the broken connection and come back; our
        # lease lets this process resume where it was once PostgreSQL answers again.
        logger.warning("run %s: database unavailable (%s); retrying", run_id, exc)
        for conn in connections.all():
            conn.close_if_unusable_or_obsolete()
            conn.close()
        countdown = min(30, 2 ** min(self.request.retries, 5))
        raise self.retry(countdown=countdown, exc=exc) from exc
    finally:
        close_old_connections()
    return {
        "claimed": result.claimed,
        "steps": result.steps,
        "status": result.status,
        "reason": result.reason,
    }


def enqueue_run(
    *, tenant_id: Any, run_id: Any, countdown: float | None = None, eta: dt.datetime | None = None
) -> None:
    """Queue a slice of the run. Duplicates are harmless: only one claim can succeed."""
    run_step.apply_async(
        kwargs={"tenant_id": str(tenant_id), "run_id": str(run_id)},
        countdown=countdown,
        eta=eta,
    )


@shared_task(name="agents.recover_runs")
def recover_runs() -> dict:
    """Beat: requeue runs whose worker died, wake due timers, re-send lost queue messages."""
    from agents.runtime.sweeps import recover

    return recover()


@shared_task(name="agents.expire_idempotency_records")
def expire_idempotency_records() -> int:
    from agents.runtime.sweeps import expire_idempotency

    return expire_idempotency()


class ContextTask(TenantTask):
    abstract = True
    one_transaction = False  # the LLM call runs between two short transactions, not in one


@shared_task(
    base=ContextTask,
    bind=True,
    name="agents.summarise_session",
    acks_late=True,
    max_retries=5,
)
def summarise_session(self, *, tenant_id: str, session_id: str) -> bool:
    """Fold a thread's older turns into its rolling summary (idempotent)."""
    from agents.conversations.summary import session_summarise
    from agents.runtime.errors import TransientStepError

    try:
        return session_summarise(tenant_id=tenant_id, session_id=session_id)
    except TransientStepError as exc:
        countdown = getattr(exc, "retry_after", None) or min(60, 2 ** (self.request.retries + 1))
        raise self.retry(countdown=countdown, exc=exc) from exc


def enqueue_summary(*, tenant_id: Any, session_id: Any) -> None:
    """Queue a summary of the thread; duplicates are harmless (the task is idempotent)."""
    summarise_session.apply_async(
        kwargs={"tenant_id": str(tenant_id), "session_id": str(session_id)}
    )


@shared_task(name="agents.detect_stuck_runs")
def detect_stuck_runs() -> dict:
    """Beat: count and log stuck runs (the console lists them; /metrics reports them)."""
    from agents.runtime.sweeps import detect_stuck

    return detect_stuck()
