"""The audit log: one append-only event per change, written in the caller's transaction."""

from __future__ import annotations

from typing import Any

from tenants.models import AuditEvent, Tenant
from tenants.principal import Principal


def audit_record(
    *,
    tenant: Tenant | None,
    actor: Principal | str,
    action: str,
    target: Any = None,
    target_type: str = "",
    target_id: str = "",
    before: Any = None,
    after: Any = None,
) -> AuditEvent:
    """Append one event to the tenant's audit log (in the caller's transaction)."""
    if target is not None:
        target_type = target_type or target._meta.label_lower
        target_id = target_id or str(target.pk)
    user = None
    if isinstance(actor, Principal):
        user = actor.user
        label = actor.label
    else:
        label = actor
    return AuditEvent.objects.create(
        tenant=tenant,
        actor_user=user,
        actor_label=label[:200],
        action=action,
        target_type=target_type,
        target_id=target_id,
        before=before,
        after=after,
    )
