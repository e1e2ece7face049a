"""Approval requests: created by the engine when a run pauses, decided by a person once,
expired or escalated by the beat sweep. Every change is audited and resumes the run on commit.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.runtime import graph_runs, progress, queue, webhooks
from agents.runtime.models import Run, RunStatus
from approvals import notifications
from approvals.arguments import arguments_check
from approvals.errors import AlreadyDecided, InvalidDecision, RequestChanged
from approvals.models import ApprovalRequest, ApprovalStatus, ApproverRole, OnExpiry
from approvals.policies import check_may_decide, needs_decision, policy_for
from tenants.audit import audit_record
from tenants.principal import Principal
from tenants.scope import system_scope

logger = logging.getLogger(__name__)
SWEEP_BATCH = 500


def approval_request_create(
    *,
    id: uuid.UUID,
    tenant_id: Any,
    run_id: Any,
    checkpoint_seq: int,
    step: str,
    action: str,
    arguments: dict,
    reason: str = "",
    amount: float | Decimal | None = None,
    due_at: dt.datetime | None = None,
    now: dt.datetime | None = None,
) -> ApprovalRequest:
    """Record that a run waits for a decision (in the engine's step transaction).

    The tenant's policy for `action` sets the deadline, who may decide and what happens at the
    deadline. If the policy lets this amount through, the request is approved at once and the
    run resumes on commit without waiting for anyone.
    """
    now = now or timezone.now()
    if amount is not None:
        amount = Decimal(str(amount)).quantize(Decimal("0.01"))
    policy = policy_for(tenant_id=tenant_id, action=action)
    starter = (
        Run.objects.for_tenant(tenant_id)
        .filter(pk=run_id)
        .values("created_by_id", "created_by__username")
        .first()
    ) or {}
    if policy is not None and policy.expires_after_minutes:
        policy_due = now + dt.timedelta(minutes=policy.expires_after_minutes)
        due_at = min(due_at, policy_due) if due_at else policy_due
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
        policy=policy,
        approver_role=policy.approver_role if policy else ApproverRole.MANAGER,
        approver_group=policy.approver_group if policy else None,
        approver_group_name=policy.approver_group.name if policy and policy.approver_group else "",
        four_eyes=policy.four_eyes if policy else False,
        on_expiry=policy.on_expiry if policy else OnExpiry.WAIT,
        started_by_id=starter.get("created_by_id"),
        started_by_label=starter.get("created_by__username") or "",
    )
    audit_record(
        tenant=request.tenant,
        actor="agent",
        action="approval.requested",
        target=request,
        after={
            "action": action,
            "arguments": arguments,
            "amount": None if amount is None else str(amount),
            "due_at": due_at and due_at.isoformat(),
            "policy": policy.pk if policy else None,
        },
    )
    _publish(request, "approval.requested")
    if not needs_decision(policy, amount):
        return _auto_approve(request, now=now)
    notifications.notify_approvers_on_commit(request, kind="requested")
    return request


def _auto_approve(request: ApprovalRequest, *, now: dt.datetime) -> ApprovalRequest:
    assert request.policy is not None
    label = "policy"
    comment = f"Amount at or below the policy threshold of {request.policy.amount_threshold}."
    ApprovalRequest.objects.for_tenant(request.tenant_id).filter(pk=request.pk).update(
        status=ApprovalStatus.APPROVED,
        decided_by_label=label,
        decided_at=now,
        comment=comment,
        version=F("version") + 1,
    )
    request.refresh_from_db()
    _resume(request, approved=True, comment=comment, decided_by=label, arguments=None)
    audit_record(
        tenant=request.tenant,
        actor="policy",
        action="approval.auto_approved",
        target=request,
        before={"status": ApprovalStatus.PENDING},
        after={"status": request.status, "comment": comment},
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
    """Decide once: a conditional update, so of two simultaneous deciders exactly one wins.

    The loser gets AlreadyDecided (409) naming who decided what. Edited arguments are checked
    against the tool's schema first (400, nothing decided). The run resumes on commit.
    """
    if not isinstance(approve, bool):
        raise InvalidDecision()
    check_may_decide(principal, request)
    if edited_arguments is not None:
        if not approve:
            raise InvalidDecision("Only an approval edits the arguments.")
        arguments_check(request.action, edited_arguments, example=request.arguments)
        if edited_arguments == request.arguments:
            edited_arguments = None  # approved as proposed
    status = ApprovalStatus.APPROVED if approve else ApprovalStatus.REJECTED
    won = (
        ApprovalRequest.objects.for_tenant(principal.tenant)
        .filter(pk=request.pk, status=ApprovalStatus.PENDING, version=request.version)
        .update(
            status=status,
            decided_by=principal.user,
            decided_by_label=principal.label,
            decided_at=timezone.now(),
            comment=comment,
            edited_arguments=edited_arguments,
            version=F("version") + 1,
        )
    )
    request.refresh_from_db()
    if not won:
        raise _lost(request)
    _resume(
        request,
        approved=approve,
        comment=comment,
        decided_by=principal.label,
        arguments=edited_arguments,
    )
    audit_record(
        tenant=principal.tenant,
        actor=principal,
        action=f"approval.{status}",
        target=request,
        before={"status": ApprovalStatus.PENDING},
        after={"status": status, "comment": comment, "edited": edited_arguments is not None},
    )
    if edited_arguments is not None:
        audit_record(
            tenant=principal.tenant,
            actor=principal,
            action="approval.arguments_edited",
            target=request,
            before={"arguments": request.arguments},
            after={"arguments": edited_arguments},
        )
    return request


def _lost(request: ApprovalRequest) -> Exception:
    """The error for a decider whose conditional update matched nothing."""
    if request.status == ApprovalStatus.PENDING:
        return RequestChanged()
    who = request.decided_by_label or "the system"
    return AlreadyDecided(
        f"Already {request.status} by {who}.",
        detail={
            "status": request.status,
            "decided_by": request.decided_by_label,
            "decided_at": request.decided_at and request.decided_at.isoformat(),
            "comment": request.comment,
            "edited_arguments": request.edited_arguments,
        },
    )


def _resume(
    request: ApprovalRequest,
    *,
    approved: bool,
    comment: str,
    decided_by: str,
    arguments: dict | None,
    expired: bool = False,
) -> bool:
    """Hand the decision to the waiting run and queue it once this transaction commits."""
    decision = {
        "approved": approved,
        "comment": comment,
        "request_id": str(request.pk),
        "arguments": arguments if arguments is not None else request.arguments,
        "edited": arguments is not None,
        "decided_by": decided_by,
    }
    if expired:
        decision["expired"] = True
    runs = Run.objects.for_tenant(request.tenant_id).filter(pk=request.run_id)
    if runs.filter(agent=graph_runs.AGENT).exists():
        # A LangGraph thread's run is resumed by its own process, which reads the decision:
        # it is not queued for our workers, and it is not done until the graph says so.
        _publish(request, "approval.decided")
        answered = graph_runs.request_decided(
            tenant_id=request.tenant_id,
            run_id=request.run_id,
            request_id=request.pk,
            decision=decision,
        )
        if answered:  # the graph's process hears of it through its tenant's webhooks
            webhooks.decision_made(tenant_id=request.tenant_id, run=runs.get(), decision=decision)
        return answered
    resumed = runs.filter(status=RunStatus.WAITING_APPROVAL, waiting_for=str(request.pk)).update(
        status=RunStatus.QUEUED,
        waiting_for="",
        wake_payload={"decision": decision},
        version=F("version") + 1,
    )
    _publish(request, "approval.decided")
    if resumed:
        progress.publish(
            tenant_id=request.tenant_id,
            run_id=request.run_id,
            kind="run.status",
            status=RunStatus.QUEUED,
        )
        tenant_id, run_id = request.tenant_id, request.run_id
        transaction.on_commit(lambda: queue.enqueue_run(tenant_id=tenant_id, run_id=run_id))
    return bool(resumed)


def approval_requests_cancel_for_run(*, tenant_id: Any, run_id: Any) -> int:
    """Cancel the pending requests of a run that was cancelled (in the caller's transaction)."""
    pending = ApprovalRequest.objects.for_tenant(tenant_id).filter(
        run_id=run_id, status=ApprovalStatus.PENDING
    )
    ids = list(pending.values_list("pk", flat=True))
    cancelled = pending.filter(pk__in=ids).update(
        status=ApprovalStatus.CANCELLED,
        decided_at=timezone.now(),
        version=F("version") + 1,
    )
    for request in ApprovalRequest.objects.for_tenant(tenant_id).filter(pk__in=ids):
        audit_record(
            tenant=request.tenant,
            actor="system:run_cancelled",
            action="approval.cancelled",
            target=request,
            before={"status": ApprovalStatus.PENDING},
            after={"status": ApprovalStatus.CANCELLED},
        )
        _publish(request, "approval.decided")
    return cancelled


def approval_request_exists(*, tenant_id: Any, request_id: Any) -> bool:
    return ApprovalRequest.objects.for_tenant(tenant_id).filter(pk=request_id).exists()


def approval_requests_close(*, tenant_id: Any, run_id: Any, ids: list[str], why: str) -> int:
    """Cancel the run's pending requests among `ids`: what they asked no longer waits (a
    LangGraph thread moved past its interrupt). Each is audited with the reason; a request
    already decided stays as it was. In the caller's transaction."""
    pending = ApprovalRequest.objects.for_tenant(tenant_id).filter(
        run_id=run_id, pk__in=ids, status=ApprovalStatus.PENDING
    )
    found = list(pending.values_list("pk", flat=True))
    closed = pending.filter(pk__in=found).update(
        status=ApprovalStatus.CANCELLED,
        decided_by_label="system: graph moved on",
        decided_at=timezone.now(),
        comment=why,
        version=F("version") + 1,
    )
    for request in ApprovalRequest.objects.for_tenant(tenant_id).filter(pk__in=found):
        audit_record(
            tenant=request.tenant,
            actor="system:graph",
            action="approval.superseded",
            target=request,
            before={"status": ApprovalStatus.PENDING},
            after={"status": ApprovalStatus.CANCELLED, "why": why},
        )
        _publish(request, "approval.decided")
    return closed


# --- deadlines ------------------------------------------------------------------------------------


def approval_requests_sweep_due(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Beat: expire (auto-reject) or escalate pending requests whose deadline has passed.

    Runs across tenants in a named system context, tenant by tenant: a read without locks
    finds the tenants with requests due, then each tenant's are locked and decided in its own
    transaction (under Citus, on the tenant's shard). Rows another transaction holds (a
    decision being made) are skipped and looked at again on the next sweep.
    """
    now = now or timezone.now()
    counts = {"expired": 0, "escalated": 0}
    due = ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, due_at__lte=now).filter(
        Q(on_expiry=OnExpiry.REJECT) | Q(on_expiry=OnExpiry.ESCALATE, escalated_at__isnull=True)
    )
    with system_scope("approval_deadlines"):
        tenants = list(due.order_by().values_list("tenant_id", flat=True).distinct())
    for tenant_id in tenants:
        with system_scope("approval_deadlines") as ctx:
            held = list(
                due.filter(tenant_id=tenant_id)
                .select_for_update(skip_locked=True, of=("self",))
                .select_related("tenant")
                .order_by("due_at")[:SWEEP_BATCH]
            )
            done = {"expired": 0, "escalated": 0}
            for request in held:
                if request.on_expiry == OnExpiry.REJECT:
                    done["expired"] += _expire(request, now=now)
                else:
                    done["escalated"] += _escalate(request, now=now)
            if done["expired"] or done["escalated"]:
                ctx.record(**done)
        counts = {key: counts[key] + done[key] for key in counts}
    return counts


def _expire(request: ApprovalRequest, *, now: dt.datetime) -> int:
    comment = "No decision before the deadline: rejected automatically."
    label = "system: deadline"
    if not (
        ApprovalRequest.objects.for_tenant(request.tenant_id)
        .filter(pk=request.pk, status=ApprovalStatus.PENDING)
        .update(
            status=ApprovalStatus.EXPIRED,
            decided_by_label=label,
            decided_at=now,
            comment=comment,
            version=F("version") + 1,
        )
    ):
        return 0
    request.refresh_from_db()
    _resume(
        request, approved=False, comment=comment, decided_by=label, arguments=None, expired=True
    )
    audit_record(
        tenant=request.tenant,
        actor="system:approval_deadlines",
        action="approval.expired",
        target=request,
        before={
            "status": ApprovalStatus.PENDING,
            "due_at": request.due_at and request.due_at.isoformat(),
        },
        after={"status": ApprovalStatus.EXPIRED, "comment": comment},
    )
    return 1


def _escalate(request: ApprovalRequest, *, now: dt.datetime) -> int:
    if not (
        ApprovalRequest.objects.for_tenant(request.tenant_id)
        .filter(pk=request.pk, status=ApprovalStatus.PENDING, escalated_at__isnull=True)
        .update(escalated_at=now, version=F("version") + 1)
    ):
        return 0
    request.refresh_from_db()
    audit_record(
        tenant=request.tenant,
        actor="system:approval_deadlines",
        action="approval.escalated",
        target=request,
        before={"approvers": request.approver_role, "group": request.approver_group_name},
        after={"approvers": "admins", "due_at": request.due_at and request.due_at.isoformat()},
    )
    _publish(request, "approval.escalated")
    notifications.notify_approvers_on_commit(request, kind="escalated")
    return 1


def _publish(request: ApprovalRequest, kind: str) -> None:
    """A progress event after commit (the inbox's live updates subscribe to these)."""
    progress.publish(
        tenant_id=request.tenant_id,
        run_id=request.run_id,
        kind=kind,
        request_id=str(request.pk),
        status=request.status,
    )
