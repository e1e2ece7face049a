"""Approval requests: created by the engine when a run pauses, decided by a person."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from approvals.errors import AlreadyDecided, InvalidDecision
from approvals.models import ApprovalRequest, ApprovalStatus
from tenants.principal import Principal
from tenants.services import audit_record


def request_create(
    *,
    id: uuid.UUID,
    tenant_id: Any,
    run_id: Any,
    checkpoint_seq: int,
    step: str,
    action: str,
    arguments: dict,
    reason: str = "",
    amount: float | None = None,
    due_at=None,
) -> ApprovalRequest:
    """Record that a run waits for a decision (in the engine's step transaction)."""
    request = ApprovalRequest.objects.create(
        id=id,
        tenant_id=tenant_id,
        run_id=run_id,
        checkpoint_seq=checkpoint_seq,
        step=step,
        action=action,
        arguments=arguments,
        reason=reason,
        amount=amount,
        due_at=due_at,
    )
    audit_record(
        tenant=None if tenant_id is None else request.tenant,
        actor="agent",
        action="approval.requested",
        target=request,
        after={"action": action, "arguments": arguments, "amount": amount},
    )
    return request


@transaction.atomic
def approval_decide(
    *,
    principal: Principal,
    request: ApprovalRequest,
    approve: bool | str,
    comment: str = "",
    edited_arguments: dict | None = None,
) -> ApprovalRequest:
    """Decide once: a conditional update, so of two simultaneous deciders exactly one wins."""
    from agents.models import Run, RunStatus
    from agents.tasks import enqueue_run

    if not isinstance(approve, bool):
        raise InvalidDecision()
    status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
    now = timezone.now()
    won = (
        ApprovalRequest.objects.for_tenant(principal.tenant)
        .filter(pk=request.pk, status=ApprovalStatus.PENDING, version=request.version)
        .update(
            status=status,
            decided_by=principal.user,
            decided_by_label=principal.label,
            decided_at=now,
            comment=comment,
            edited_arguments=edited_arguments,
            version=F("version") + 1,
        )
    )
    request.refresh_from_db()
    if not won:
        raise AlreadyDecided(
            f"Already {request.status} by {request.decided_by_label or 'the system'}.",
            detail={
                "status": request.status,
                "decided_by": request.decided_by_label,
                "decided_at": request.decided_at and request.decided_at.isoformat(),
            },
        )
    decision = {
        "approved": approve,
        "comment": comment,
        "request_id": str(request.pk),
        "arguments": edited_arguments if edited_arguments is not None else request.arguments,
        "edited": edited_arguments is not None,
        "decided_by": principal.label,
    }
    Run.objects.for_tenant(principal.tenant).filter(
        pk=request.run_id, status=RunStatus.WAITING_APPROVAL, waiting_for=str(request.pk)
    ).update(
        status=RunStatus.QUEUED,
        waiting_for="",
        wake_payload={"decision": decision},
        version=F("version") + 1,
    )
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action=f"approval.{status}",
        target=request,
        before={"status": "pending"},
        after={"status": status, "comment": comment, "edited": edited_arguments},
    )
    transaction.on_commit(lambda: enqueue_run(tenant_id=request.tenant_id, run_id=request.run_id))
    return request


def requests_cancel_for_run(*, tenant_id: Any, run_id: Any) -> int:
    return (
        ApprovalRequest.objects.for_tenant(tenant_id)
        .filter(run_id=run_id, status=ApprovalStatus.PENDING)
        .update(status=ApprovalStatus.CANCELLED, version=F("version") + 1)
    )
