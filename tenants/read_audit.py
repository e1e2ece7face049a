"""Audits of reads, kept out of the reading transaction.

A request that only reads (a GET) writes nothing in its own transaction, so that transaction
could run on a replica; the audit of what it read is written once it has committed, by the
primary, in a transaction of its own that commits without waiting for its WAL to reach the
disk (`synchronous_commit` off for it alone: about 0.1 ms instead of a flush, 3-6 ms here; only
a PostgreSQL crash within the WAL writer's delay, at most about 0.6 s, could lose the row). A
read whose transaction rolls back records nothing; if the audit cannot be written, the
request fails (the callback's error reaches the response) rather than answer unaudited.
"""

from __future__ import annotations

from django.db import connection, transaction

from tenants.audit import audit_record
from tenants.models import Tenant
from tenants.principal import Principal
from tenants.scope import tenant_scope


def audit_read(
    *, tenant: Tenant, actor: Principal, action: str, target_type: str, target_id: str
) -> None:
    """Record that `actor` read something, after the current transaction commits (at once
    outside one). Never for a request that writes too: audit that one in its own
    transaction (`audit_record`), whose commit is durable."""

    def record() -> None:
        with tenant_scope(tenant.pk):
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
            audit_record(
                tenant=tenant,
                actor=actor,
                action=action,
                target_type=target_type,
                target_id=target_id,
            )

    transaction.on_commit(record)
