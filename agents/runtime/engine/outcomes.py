"""What a step's transition means for its run: the status it leaves the run in, the check
that it names a real step, and what is sent once the step's transaction commits."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.runtime import progress, queue
from agents.runtime.definitions import Agent, Transition
from agents.runtime.engine import store
from agents.runtime.models import RunStatus

# The run's status after a step that does not hand over to the next one in this drive.
STOPS = {
    "goto": RunStatus.QUEUED,  # the time slice is used up: back to the queue
    "finish": RunStatus.SUCCEEDED,
    "fail": RunStatus.FAILED,
    "approval": RunStatus.WAITING_APPROVAL,
    "timer": RunStatus.WAITING_TIMER,
    "event": RunStatus.WAITING_EVENT,
}


def check(agent: Agent, t: Transition) -> None:
    """A step must return a Transition naming a step the agent has."""
    if not isinstance(t, Transition):
        raise TypeError(f"a step must return a Transition (goto, finish, ...), got {t!r}")
    if t.kind in {"goto", "approval", "timer", "event"}:
        agent.get_step(t.next_step)


def enqueue_on_commit(tenant_id: str, run_id: Any, **options: Any) -> None:
    transaction.on_commit(lambda: queue.enqueue_run(tenant_id=tenant_id, run_id=run_id, **options))


def publish_stored(
    claim: store.Claim, kind: str, *, seq: int, committed: bool = False, **data: Any
) -> None:
    """Send an event the engine's SQL already stored as number `seq` (after commit;
    `committed`: the write was its own transaction and has committed already)."""
    event = {"tenant_id": claim.tenant_id, "run_id": claim.run_key, "kind": kind, **data}
    event["seq"] = seq  # as progress.publish builds it, without its second copy of `data`
    progress.send_stored(event, committed=committed)
