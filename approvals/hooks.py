"""What approvals registers with the runtime: a step that asks for approval opens a request
(in the step's transaction), a cancelled run's pending requests are cancelled with it, as
are those of pauses that no longer wait (a LangGraph thread moved past them), and
tool-calling agents can ask whether a policy covers a tool."""

from __future__ import annotations

from typing import Any

from agents.runtime import extensions
from approvals import policies, selectors, services


def _open_request(pause: extensions.Pause) -> None:
    if services.approval_request_exists(tenant_id=pause.tenant_id, request_id=pause.id):
        return  # the same pause again (a LangGraph interrupt written twice): one request
    services.approval_request_create(
        id=pause.id,
        tenant_id=pause.tenant_id,
        run_id=pause.run_id,
        checkpoint_seq=pause.checkpoint_seq,
        step=pause.step,
        action=pause.action,
        arguments=pause.arguments,
        reason=pause.reason,
        amount=pause.amount,
        due_at=pause.due_at,
    )


def _run_cancelled(sender: Any, *, tenant_id: Any, run_id: Any, **_: Any) -> None:
    services.approval_requests_cancel_for_run(tenant_id=tenant_id, run_id=run_id)


def _pauses_closed(
    sender: Any, *, tenant_id: Any, run_id: Any, pause_ids: list[str], why: str, **_: Any
) -> None:
    services.approval_requests_close(tenant_id=tenant_id, run_id=run_id, ids=pause_ids, why=why)


def _policy_covers(*, tenant_id: Any, action: str) -> bool:
    """Whether one of the tenant's approval policies covers `action` (tool-calling agents
    pause before such a tool)."""
    return policies.policy_for(tenant_id=tenant_id, action=action) is not None


def register() -> None:
    extensions.register_pause_handler("approval", _open_request)
    extensions.register_provider("approvals.policy_covers", _policy_covers)
    # A rewind to a checkpoint whose step asked for approval asks again as it asked.
    extensions.register_provider("approvals.requests_for_run", selectors.approval_requests_for_run)
    extensions.run_cancelled.connect(_run_cancelled, dispatch_uid="approvals.run_cancelled")
    extensions.pauses_closed.connect(_pauses_closed, dispatch_uid="approvals.pauses_closed")
