"""The Celery task base that acts for one tenant."""

from __future__ import annotations

from celery import Task

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
