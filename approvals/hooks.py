"""What approvals registers with the runtime: a step that asks for approval opens a request
(in the step's transaction), and a cancelled run's pending requests are cancelled with it."""

from __future__ import annotations

from typing import Any

from agents.runtime import extensions
from approvals import services


def _open_request(pause: extensions.Pause) -> None:
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


def register() -> None:
    extensions.register_pause_handler("approval", _open_request)
    extensions.run_cancelled.connect(_run_cancelled, dispatch_uid="approvals.run_cancelled")
