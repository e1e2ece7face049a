"""Celery tasks of conversations: take ids, call a service, and nothing else."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from agents.conversations.summary import session_summarise
from agents.runtime.errors import TransientStepError
from tenants.tasks import TenantTask


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
