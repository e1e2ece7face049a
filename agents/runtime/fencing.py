"""The fence of an action on a run someone looked at (the admin console's repairs, a fenced
cancel): a conditional UPDATE on the version they saw (RunChanged when it moved,
ActionNotAllowed when the run's state forbids it), the audit record, and the run.status event
(with a requeue on commit when asked)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from agents.runtime import queue
from agents.runtime.errors import ActionNotAllowed, RunChanged
from agents.runtime.models import Run, RunStatus
from agents.runtime.progress import publish
from tenants.audit import audit_record
from tenants.principal import Principal

logger = logging.getLogger("agents.console.actions")

# A run whose worker holds a live lease is being worked on: only cancel, release and resolve
# apply to it. "Free" is everything else.
LEASE_EXPIRED = Q(status=RunStatus.RUNNING, lease_expires_at__lt=Now()) | Q(
    status=RunStatus.RUNNING, lease_owner=""
)
FREE = ~Q(status=RunStatus.RUNNING) | LEASE_EXPIRED
# Why an action that needs a free run is refused while a worker holds it.
BUSY = "A worker is running this step; release the lease first ({status})."
REQUEUE = {
    "status": RunStatus.QUEUED,
    "lease_owner": "",
    "lease_expires_at": None,
    "not_before": Now(),  # also marks when the run was queued (stuck detection)
    "resolved_at": None,
}


def fenced(
    principal: Principal,
    run: Run,
    version: int,
    allowed: Q,
    refusal: str,
    *,
    bump: bool = True,
    **fields: Any,
) -> Run:
    """UPDATE the run if it still has `version` and matches `allowed`; else explain why not."""
    runs = Run.objects.for_tenant(principal.tenant).filter(pk=run.pk)
    changes: dict[str, Any] = {"version": F("version") + 1, "updated_at": Now()} if bump else {}
    if not runs.filter(allowed, version=version).update(**changes, **fields):
        current = runs.first()
        if current is None or current.version != version:
            raise RunChanged(detail={"version": getattr(current, "version", None)})
        raise ActionNotAllowed(refusal.format(status=current.get_status_display().lower()))
    return runs.get()


def audit(principal: Principal, run: Run, action: str, before: Run, **after: Any) -> None:
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action=f"run.console.{action}",
        target=run,
        before={"status": before.status, "version": before.version},
        after={"status": run.status, "version": run.version, **after},
    )
    logger.info(
        "console action %s on run %s",
        action,
        run.pk,
        extra={"tenant_id": str(run.tenant_id), "run_id": str(run.pk), "action": action},
    )


def changed(run: Run, *, enqueue: bool) -> None:
    publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.status", status=run.status)
    if enqueue:
        tenant_id, run_id = run.tenant_id, run.pk
        transaction.on_commit(lambda: queue.enqueue_run(tenant_id=tenant_id, run_id=run_id))
