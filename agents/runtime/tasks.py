"""Celery tasks of the engine: take ids, call the engine or a sweep, and nothing else."""

from __future__ import annotations

import logging
import os
import socket
import time

from billiard.exceptions import WorkerLostError
from celery import shared_task
from celery.worker.request import Request
from django.conf import settings
from django.db import close_old_connections, connections

from agents.runtime import metrics, run_counts, webhooks
from agents.runtime.engine.runner import DriveResult, drive
from agents.runtime.errors import INFRASTRUCTURE_ERRORS
from agents.runtime.sweeps import expire_idempotency, recover, take_back_from
from core.log_context import bind as log_context
from tenants.tasks import TenantTask

logger = logging.getLogger(__name__)
metrics.install()  # step counters for /metrics, sent from whichever process runs steps


class EngineRequest(Request):
    """A run_step message as the worker's parent process sees it. When the pool process
    running it dies (kill -9, the OOM killer), the parent learns it once billiard's
    lost-worker grace has passed (a few seconds) and takes that process's runs back, so the
    message Celery redelivers finds its run free even when beat (whose recovery sweep
    usually gets there first, by the dead process's liveness key) is not running."""

    def on_failure(self, exc_info, send_failed_event=True, return_ok=False):
        exc = getattr(exc_info.exception, "exc", exc_info.exception)
        if isinstance(exc, WorkerLostError) and self.worker_pid:
            dead = f"{socket.gethostname()}:{self.worker_pid}"
            try:
                taken = take_back_from(dead)
                logger.warning("pool process %s died holding %d run(s): taken back", dead, taken)
            except Exception:  # noqa: BLE001 - the sweep takes them back in seconds anyway
                logger.warning("could not take back the runs of %s", dead, exc_info=True)
            finally:
                connections["default"].close()  # the parent holds no idle session
        return super().on_failure(exc_info, send_failed_event, return_ok)


class EngineTask(TenantTask):
    abstract = True
    one_transaction = False  # the engine commits once per step, in its own transactions
    Request = EngineRequest


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
            result = _drive_through_outages(self, tenant_id=tenant_id, run_id=run_id)
    finally:
        close_old_connections()
    return {
        "claimed": result.claimed,
        "steps": result.steps,
        "status": result.status,
        "reason": result.reason,
    }


def _drive_through_outages(task, *, tenant_id: str, run_id: str) -> DriveResult:
    """drive(), waiting here while the database or Redis is away (mid-step, or while claiming
    or persisting): the broken connections are dropped and the slice tried again every
    second at most, so the run resumes (our lease lets this process take it again) as soon as
    the service answers. The step's own retry budget is not touched.

    The message is held meanwhile, not sent back with a countdown: retried that way, every
    message the workers took during an outage came back as a timed one kept in the worker's
    memory, hundreds of them in a few seconds, and a run taken back from a dead worker (sent
    ahead of the queue) ran only after the others' timers, 10 s and more after the database
    returned. Past AGENTSTATE_OUTAGE_WAIT_SECONDS the task is retried with backoff as before,
    freeing the slot."""
    deadline = time.monotonic() + settings.AGENTSTATE_OUTAGE_WAIT_SECONDS
    pause = 0.1
    while True:
        try:
            return drive(tenant_id=tenant_id, run_id=run_id, worker=_worker_id())
        except INFRASTRUCTURE_ERRORS as exc:
            for conn in connections.all():
                conn.close_if_unusable_or_obsolete()
                conn.close()
            if time.monotonic() + pause > deadline:
                logger.warning("run %s: a service is still unavailable (%s); retrying", run_id, exc)
                countdown = min(30, 2 ** min(task.request.retries, 5))
                raise task.retry(countdown=countdown, exc=exc) from exc
            logger.warning("run %s: a service is unavailable (%s); waiting", run_id, exc)
            time.sleep(pause)
            pause = min(1.0, pause * 2)


@shared_task(name="agents.recover_runs")
def recover_runs() -> dict:
    """Beat: requeue runs whose worker died, wake due timers, re-send lost queue messages."""
    return recover()


@shared_task(name="agents.compact_run_counts")
def compact_run_counts() -> int:
    """Beat: fold the run-count rows of tenants that have many (agents/runtime/run_counts.py)."""
    return run_counts.compact()


@shared_task(name="agents.expire_idempotency_records")
def expire_idempotency_records() -> int:
    return expire_idempotency()


@shared_task(name="agents.deliver_webhook", acks_late=True)
def deliver_webhook(*, tenant_id: str, delivery_id: str) -> str:
    """Try one webhook delivery; a failed try queues the next one after its backoff."""
    status = webhooks.webhook_deliver(tenant_id=tenant_id, delivery_id=delivery_id)
    if status == "pending":
        webhooks.webhook_send_later(tenant_id=tenant_id, delivery_id=delivery_id)
    return status


@shared_task(name="agents.send_due_webhooks")
def send_due_webhooks() -> int:
    """Beat: queue the deliveries whose try is due (a lost message is sent again)."""
    return webhooks.webhooks_send_due()
