"""Celery tasks of the engine: take ids, call the engine or a sweep, and nothing else."""

from __future__ import annotations

import logging
import os
import socket

from celery import shared_task
from django.db import close_old_connections, connections

from agents.runtime import metrics
from agents.runtime.engine.runner import drive
from agents.runtime.errors import INFRASTRUCTURE_ERRORS
from agents.runtime.sweeps import expire_idempotency, recover
from core.log_context import bind as log_context
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
    except INFRASTRUCTURE_ERRORS as exc:
        # The database or Redis went away mid-step (or while claiming or persisting). Drop the
        # broken connections and come back; our lease lets this process resume where it was
        # once the service answers again. The step's own retry budget is not touched.
        logger.warning("run %s: a service is unavailable (%s); retrying", run_id, exc)
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


@shared_task(name="agents.recover_runs")
def recover_runs() -> dict:
    """Beat: requeue runs whose worker died, wake due timers, re-send lost queue messages."""
    return recover()


@shared_task(name="agents.expire_idempotency_records")
def expire_idempotency_records() -> int:
    return expire_idempotency()
