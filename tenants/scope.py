"""The RLS scope: which tenant the database lets the current transaction see.

Web requests get it from `TenantMiddleware`, API calls from `ApiKeyAuthentication`, Celery
tasks from `TenantTask`; all three go through `activate()`. Work that must span tenants
runs inside `system_scope(name)`, which is named, logged and audited.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from tenants.audit import audit_record

logger = logging.getLogger(__name__)


def activate(
    *,
    tenant_id: uuid.UUID | str | None,
    user_id: int | str | None = None,
    system: str = "",
    using: str = DEFAULT_DB_ALIAS,
) -> None:
    """Set the row-level-security settings for the rest of the current transaction (of the
    database `using`: the primary, or a replica for reads that may lag)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            *activation(tenant_id=tenant_id, user_id=user_id, system=system, using=using)
        )


ACTIVATE_SQL = (
    "SELECT set_config('app.tenant_id', %s, true), set_config('app.user_id', %s, true),"
    " set_config('app.system_context', %s, true)"
)


def activation(
    *,
    tenant_id: uuid.UUID | str | None,
    user_id: int | str | None = None,
    system: str = "",
    using: str = DEFAULT_DB_ALIAS,
) -> tuple[str, list[str]]:
    """The statement `activate` sends and its parameters, for a caller that sends it together
    with the statement it protects (one round trip: `ACTIVATE_SQL + "; " + sql`, then
    `cursor.nextset()`)."""
    if not connections[using].in_atomic_block:
        # Outside a transaction SET LOCAL would last one statement and protect nothing.
        raise RuntimeError("tenant context must be activated inside transaction.atomic()")
    return ACTIVATE_SQL, [str(tenant_id or ""), str(user_id or ""), system]


def current_settings(using: str = DEFAULT_DB_ALIAS) -> tuple[str, str, str]:
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('app.tenant_id', true), current_setting('app.user_id', true),"
            " current_setting('app.system_context', true)"
        )
        row = cursor.fetchone()
    return tuple(value or "" for value in row)  # type: ignore[return-value]


@contextlib.contextmanager
def transaction_scope(using: str = DEFAULT_DB_ALIAS) -> Iterator[None]:
    """A transaction (or savepoint) whose tenant settings do not outlive it.

    Outermost, COMMIT or ROLLBACK forgets SET LOCAL by itself. Nested (a savepoint, as in
    tests), the settings of the enclosing transaction are put back on the way out; after a
    rollback the savepoint has already put them back.
    """
    connection = connections[using]
    outermost = not connection.in_atomic_block
    with transaction.atomic(using=using):
        previous = None if outermost else current_settings(using)
        yield
        if previous is not None and not connection.needs_rollback:
            activate(
                tenant_id=previous[0], user_id=previous[1] or None, system=previous[2], using=using
            )


@contextlib.contextmanager
def _scoped(
    tenant_id: Any, user_id: Any, system: str, using: str = DEFAULT_DB_ALIAS
) -> Iterator[None]:
    with transaction_scope(using):
        activate(tenant_id=tenant_id, user_id=user_id, system=system, using=using)
        yield


def tenant_scope(
    tenant_id: uuid.UUID | str, *, user_id: int | None = None, using: str = DEFAULT_DB_ALIAS
):
    """One transaction (or savepoint) in which the database shows exactly this tenant (on
    the primary, or with `using` on a replica)."""
    if not tenant_id:
        raise ValueError("tenant_scope needs a tenant id")
    return _scoped(tenant_id, user_id, "", using)


@dataclass
class SystemScope:
    name: str
    changes: dict[str, Any] = field(default_factory=dict)

    def record(self, **counts: Any) -> None:
        """Note what the system work changed; it is audited when the context closes."""
        self.changes.update(counts)


@contextlib.contextmanager
def system_scope(name: str) -> Iterator[SystemScope]:
    """The one way to see across tenants: a named, logged, audited transaction."""
    if not name or not name.replace("_", "").replace(".", "").isalnum():
        raise ValueError("system context names are short identifiers, like 'ttl_sweep'")
    ctx = SystemScope(name)
    with _scoped(None, None, name):
        logger.info("system context %s entered", name)
        yield ctx
        if ctx.changes:
            audit_record(
                tenant=None,
                actor=f"system:{name}",
                action=f"system.{name}",
                after=ctx.changes,
            )
