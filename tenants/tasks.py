"""The Celery task base that acts for one tenant."""

from __future__ import annotations

import smtplib

from celery import Task, shared_task

from tenants.auth import passwords
from tenants.scope import tenant_scope


class TenantTask(Task):
    """A task for one tenant: called with `tenant_id=`; the database shows only that tenant.

    By default the whole task is one transaction with the tenant context set. Tasks that
    commit several times (the step engine) set `one_transaction = False` and open
    `tenant_scope(tenant_id)` around each transaction themselves.
    """

    abstract = True
    one_transaction = True

    def __call__(self, *args, **kwargs):
        tenant_id = kwargs.get("tenant_id")
        if not tenant_id:
            raise ValueError(f"{self.name} acts for a tenant and needs tenant_id=")
        if not self.one_transaction:
            return super().__call__(*args, **kwargs)
        with tenant_scope(tenant_id):
            return super().__call__(*args, **kwargs)


@shared_task(
    name="tenants.send_password_reset",
    autoretry_for=(OSError, smtplib.SMTPException),
    retry_backoff=True,
    retry_backoff_max=600,
    max_retries=5,
)
def send_password_reset(*, email: str) -> None:
    """Email a password reset link to the accounts with this address (none: nothing)."""
    passwords.password_reset_send(email=email)
