"""Reads of the approvals app that other apps use (always with the tenant)."""

from __future__ import annotations

import uuid
from typing import Any

from approvals.models import ApprovalRequest


def requests_for_run(*, tenant_id: Any, run_id: Any) -> list[ApprovalRequest]:
    """Approval requests of one run, oldest first."""
    return list(
        ApprovalRequest.objects.for_tenant(tenant_id).filter(run_id=run_id).order_by("requested_at")
    )


def request_awaited(*, tenant_id: Any, run_id: Any, waiting_for: str) -> ApprovalRequest | None:
    """The request a run waiting for approval names in `waiting_for`, or None."""
    try:
        request_id = uuid.UUID(waiting_for)
    except ValueError:
        return None
    return (
        ApprovalRequest.objects.for_tenant(tenant_id).filter(run_id=run_id, pk=request_id).first()
    )
