"""Celery tasks of the approvals app: take ids, call a service, nothing else."""

from __future__ import annotations

import logging
import smtplib

from celery import shared_task

from approvals.notifications import request_notify
from approvals.services import approval_requests_sweep_due
from tenants.tasks import TenantTask

logger = logging.getLogger(__name__)


class NotifyTask(TenantTask):
    abstract = True
    one_transaction = False  # reads in a tenant transaction, sends mail after it ends


@shared_task(
    base=NotifyTask,
    name="approvals.notify_approvers",
    autoretry_for=(OSError, smtplib.SMTPException),
    retry_backoff=True,
    retry_backoff_max=600,
    max_retries=8,
)
def notify_approvers(*, tenant_id: str, request_id: str, kind: str = "requested") -> int:
    """Email the people who may decide the request (or, escalated, the admins)."""
    return request_notify(tenant_id=tenant_id, request_id=request_id, kind=kind)


@shared_task(name="approvals.sweep_deadlines")
def sweep_deadlines() -> dict:
    """Beat: expire or escalate pending requests whose deadline passed."""
    return approval_requests_sweep_due()
