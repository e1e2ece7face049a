"""What commits with a step besides its checkpoint: the messages it said, the pause it asked
for (handed to the registered pause handler), and the writes features queued on its context.
Called inside the transaction that persists the step, after its fenced write succeeded."""

from __future__ import annotations

import uuid

from django.utils import timezone

from agents.runtime import extensions
from agents.runtime.definitions import Transition
from agents.runtime.engine.step_context import StepContext
from agents.runtime.engine.store import Claim
from agents.runtime.services import messages_append


def write_extras(
    claim: Claim,
    *,
    seq: int,
    step: str,
    ctx: StepContext,
    t: Transition,
    approval_id: uuid.UUID | None,
) -> None:
    """Write the step's messages, its pause and its queued writes (in the step's transaction)."""
    if ctx._outbox and claim.session_id is not None:
        messages_append(
            tenant_id=claim.tenant_id,
            session_id=claim.session_id,
            run_id=claim.run_id,
            messages=ctx._outbox,
        )
    if approval_id is not None and t.approval is not None:
        due_in = t.approval.get("due_in")
        extensions.pause_handler("approval")(
            extensions.Pause(
                id=approval_id,
                tenant_id=claim.tenant_id,
                run_id=claim.run_id,
                checkpoint_seq=seq + 1,
                step=step,
                action=t.approval["action"],
                arguments=t.approval["arguments"],
                reason=t.approval.get("reason", ""),
                amount=t.approval.get("amount"),
                due_at=timezone.now() + due_in if due_in else None,
            )
        )
    for write in ctx._writes:
        write()
