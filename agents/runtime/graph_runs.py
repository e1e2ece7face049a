"""The state of a LangGraph thread's run, as the graph has it (agents/runtime/external.py
stores the thread; this module says where its run stands).

A run's status follows its graph, from what `AgentStateSaver` (sdk/python) sends beside each
checkpoint and each task's writes:

- **running** while its latest checkpoint has next nodes (the saver sends `next`: the nodes
  LangGraph's trigger channels — `__start__`, `branch:to:<node>`, a complete `join:…` barrier,
  `__pregel_tasks` sends — will run from it), or once the graph was resumed;
- **waiting_approval** while an `interrupt({"action": ...})` of the root namespace is open
  (one approval request per interrupt: a subgraph's interrupt is written in its own namespace
  and again by the parent's task, and only the root's write files it, on the root run);
  **waiting_event** while a plain `interrupt(...)` waits for `Command(resume=...)`;
- **failed** when the latest checkpoint's writes hold the graph's error (`__error__`);
- **succeeded** only when the latest checkpoint has no next node (the graph reached END).

A killed process leaves its run running: nothing here can drive it (the console's stuck list
says how long it has been silent). An interrupt closes when the graph moves past it by any
path: a decision (approvals), a resume value the graph was given itself (a RESUME write), a
newer checkpoint of the root namespace (the step ran on, `update_state`, a fork), the same task
interrupting with something else, or the thread deleted. A pending request it opened is then
cancelled through `extensions.pauses_closed` (approvals audits it).

Everything runs in the caller's transaction and tenant scope.
"""

from __future__ import annotations

import uuid
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django.db.models import F, Q
from django.utils import timezone

from agents.runtime import extensions
from agents.runtime.errors import AmountMismatch, DrivenElsewhere, InvalidAmount
from agents.runtime.models import (
    FINISHED,
    AgentSession,
    Checkpoint,
    ExternalCheckpoint,
    GraphInterrupt,
    Run,
    RunStatus,
)
from agents.runtime.progress import publish

AGENT = "langgraph"  # the agent name of external threads' runs (external.AGENT)
ROOT_NS = ""
INTERRUPT, RESUME, ERROR = "__interrupt__", "__resume__", "__error__"
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
ALL = "*"  # a resume value for every open interrupt of the checkpoint
# What an approval request's amount column holds (max_digits=14, decimal_places=2).
MAX_AMOUNT = Decimal("999999999999.99")
CENT = Decimal("0.01")

MOVED_ON = "The graph moved on without this decision: a newer checkpoint replaced its own."
UPDATED = "The graph moved on without this decision: its state was updated (update_state)."
RESUMED_OWN = (
    "The graph moved on without this decision: it was resumed with its own value "
    "(Command(resume=...))."
)
REINTERRUPTED = "The graph's task interrupted again with another question."


def is_graph_run(run: Run) -> bool:
    return run.agent == AGENT


# What each action that drives a run would need, and what to do on a graph's run instead.
REFUSALS = {
    "cancel": "Stop the graph's process, or delete the thread (saver.delete_thread).",
    "retry": "Invoke the graph again on this thread: it continues from its last checkpoint.",
    "resume": "Invoke the graph again on this thread: it continues from its last checkpoint.",
    "release": "No worker here holds it: the graph runs in its own process.",
    "replay": "Time-travel in the graph: invoke it with the config of an earlier checkpoint.",
    "state": "Change its state with graph.update_state(config, values) in the graph's process.",
    "event": "Resume the graph with Command(resume=...) in its process.",
}


def refuse(run: Run, action: str) -> None:
    """Raise DrivenElsewhere (409) for an action AgentState cannot take on a graph's run."""
    if is_graph_run(run):
        advice = REFUSALS.get(action, "")
        raise DrivenElsewhere(
            f"This run is a LangGraph thread: its graph runs in its own process, so "
            f"AgentState cannot {action} it. {advice}".strip()
        )


def summary(run_input: dict[str, Any], output: Any) -> str:
    """What the lists call a thread's run: its thread id (and the subgraph, for a namespace)."""
    thread = str(run_input.get("thread_id") or "LangGraph thread")
    ns = str(run_input.get("checkpoint_ns") or "")
    return f"{thread} › {ns.split(':')[0]}" if ns else thread


def node_of(task_path: str) -> str:
    """The node a task runs, from LangGraph's task path ("~__pregel_pull, ask" → "ask")."""
    parts = [p.strip() for p in str(task_path).split(",")]
    return parts[1][:100] if len(parts) > 1 and parts[0] == "~__pregel_pull" else ""


# --- hooks the put paths call ---------------------------------------------------------------------


def checkpoint_saved(
    *,
    run: Run,
    checkpoint_ns: str,
    checkpoint_id: str,
    shown_id: Any,
    next_nodes: list[str] | None,
    source: str = "",
    replaced: bool = False,
) -> None:
    """After a checkpoint of the run was saved: note its next nodes (None: an older client
    that does not send them), close the interrupts it moved past, and say where the run
    stands. `source` is LangGraph's: "loop" (a step ran: an interrupted node can only have
    run on with a resume value), "update" (update_state), "input", "fork"."""
    # Its nodes ran elsewhere: no attempt or duration was measured here (pages and charts
    # would otherwise show a 0 ms attempt per checkpoint).
    shown: dict[str, Any] = {"attempt": None, "started_at": None, "duration_ms": None}
    on = names(next_nodes) if next_nodes is not None else ""
    if next_nodes is not None:
        shown["next_step"] = on
    Checkpoint.objects.for_tenant(run.tenant_id).filter(pk=shown_id).update(**shown)
    if checkpoint_ns == ROOT_NS:
        why = {"loop": RESUMED_OWN, "update": UPDATED}.get(source, MOVED_ON)
        _close(run, Q(checkpoint_id__lt=checkpoint_id), why)
    # A new checkpoint is the thread's latest (LangGraph puts a thread's checkpoints in order,
    # with ids that grow); one saved again may not be, so that one is looked up.
    latest = None if replaced else (checkpoint_id, on)
    refresh(run, latest=latest)


def writes_saved(
    *,
    run: Run,
    checkpoint_ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    channels: list[str],
    interrupts: list[dict[str, Any]],
    resumed: list[str] | None,
    errors: list[str] | None,
) -> None:
    """After a task's pending writes were saved: open what its interrupts ask (root namespace
    only), note a resume value the graph was given, and say where the run stands."""
    for interrupt in interrupts:  # refused before anything is judged (the request rolls back)
        _judged_amount(interrupt.get("value"))
    if checkpoint_ns != ROOT_NS:
        # A subgraph's own namespace: its interrupt reaches the root as the parent task's
        # write, and is filed there; here the subgraph's run only shows it waits.
        if INTERRUPT in channels:
            Run.objects.filter(pk=run.pk).update(
                status=RunStatus.WAITING_EVENT, waiting_for="interrupt", finished_at=None
            )
        return
    if INTERRUPT in channels:
        _interrupted(run, checkpoint_id, task_id, node_of(task_path), interrupts)
    if task_id == NULL_TASK_ID and RESUME in channels:
        _resumed(run, checkpoint_id, resumed or [ALL])
    if ERROR in channels:
        _raised(run, checkpoint_id, errors)
    if {INTERRUPT, RESUME, ERROR} & set(channels):
        refresh(run)  # other writes change nothing until their checkpoint comes


def request_decided(*, tenant_id: Any, run_id: Any, request_id: Any, decision: dict) -> bool:
    """A person decided the request an interrupt opened: the graph's process reads the
    decision (`AgentStateSaver.decision`) and resumes; until it does the run is running (it
    has next nodes), never succeeded. Returns whether the run was waiting for it."""
    run = Run.objects.for_tenant(tenant_id).select_for_update().filter(pk=run_id).first()
    if run is None:
        return False
    answered = (
        GraphInterrupt.objects.for_tenant(tenant_id)
        .filter(run=run, request_id=request_id, answered_at__isnull=True, closed_at__isnull=True)
        .update(answered_at=timezone.now())
    )
    Run.objects.filter(pk=run.pk).update(wake_payload={"decision": decision})
    refresh(run)
    return bool(answered)


def thread_deleting(*, tenant_id: Any, thread_id: str) -> None:
    """Before a thread is forgotten: its runs' pending requests are cancelled (and audited)."""
    runs = Run.objects.for_tenant(tenant_id).filter(
        session__in=AgentSession.objects.for_tenant(tenant_id).filter(agent=AGENT, title=thread_id)
    )
    for run_id in runs.values_list("pk", flat=True):
        extensions.run_cancelled.send(sender=Run, tenant_id=tenant_id, run_id=run_id)


# --- where the run stands -------------------------------------------------------------------------


def refresh(run: Run, *, latest: tuple[str, str] | None = None) -> str:
    """Derive the run's status from its latest checkpoint (`latest`: its id and next nodes,
    when the caller knows them), its open interrupts and the error its graph last raised;
    store it (and publish it) if it changed. `run` is the row as locked by the caller."""
    ns = (run.input or {}).get("checkpoint_ns", ROOT_NS) if isinstance(run.input, dict) else ""
    if latest is None:
        found = (
            ExternalCheckpoint.objects.for_tenant(run.tenant_id)
            .filter(run=run, checkpoint_ns=ns)
            .order_by("-checkpoint_id")
            .values_list("checkpoint_id", "shown_as__next_step")
            .first()
        )
        latest = (found[0], found[1] or "") if found is not None else None
    waiting = list(
        GraphInterrupt.objects.for_tenant(run.tenant_id)
        .filter(run=run, answered_at__isnull=True, closed_at__isnull=True)
        .order_by("created_at", "pk")
        .values_list("request_id", flat=True)
    )
    # The error a task raised at a checkpoint (its `__error__` write, which may arrive before
    # that checkpoint does): the run failed there, unless a newer checkpoint moved past it.
    raised = run.error if isinstance(run.error, dict) else None
    if raised is not None and latest is not None:
        raised = None if str(raised.get("checkpoint_id", "")) < latest[0] else raised
    # The node(s) the graph is on while it is not done (the step label names what ran).
    on = latest[1] if latest is not None else ""
    requests = [str(r) for r in waiting if r is not None]
    if requests:
        keep = run.waiting_for if run.waiting_for in requests else requests[0]
        return _set(run, RunStatus.WAITING_APPROVAL, waiting_for=keep, on=on)
    if waiting:
        return _set(run, RunStatus.WAITING_EVENT, waiting_for="interrupt", on=on)
    if raised is not None:
        return _set(run, RunStatus.FAILED, error=raised, on=on)
    if latest is None or on:
        return _set(run, RunStatus.RUNNING, on=on)
    return _set(run, RunStatus.SUCCEEDED)


def _raised(run: Run, checkpoint_id: str, errors: list[str] | None) -> None:
    """Keep what a task raised at `checkpoint_id` (refresh decides whether it still holds)."""
    message = (errors or ["The graph raised an error."])[0][:2000]
    run.error = {"code": "graph_error", "message": message, "checkpoint_id": checkpoint_id}
    Run.objects.filter(pk=run.pk).update(error=run.error)


def _set(run: Run, status: str, *, waiting_for: str = "", error: Any = None, on: str = "") -> str:
    """One UPDATE of the run row (its version moves on when its status does)."""
    at = timezone.now()
    changed = run.status != status or run.waiting_for != waiting_for
    fields: dict[str, Any] = {
        "status": status,
        "waiting_for": waiting_for,
        "error": error,
        "finished_at": at if status in FINISHED else None,
        "updated_at": at,  # the graph's last sign of life (stuck detection reads it)
    }
    if on:
        fields["current_step"] = on[:100]
    if run.started_at is None:
        fields["started_at"] = run.created_at
    if changed:
        fields["version"] = F("version") + 1
    Run.objects.filter(pk=run.pk).update(**fields)
    run.status, run.waiting_for, run.error = status, waiting_for, error
    if changed:
        publish(tenant_id=run.tenant_id, run_id=run.pk, kind="run.status", status=status)
    return status


# --- interrupts -----------------------------------------------------------------------------------


def request_id_for(run: Run, interrupt_id: str) -> uuid.UUID:
    """The approval request of an interrupt: the same interrupt always names the same one."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"agentstate:{run.pk}:{interrupt_id}")


def _interrupted(
    run: Run, checkpoint_id: str, task_id: str, node: str, interrupts: list[dict[str, Any]]
) -> None:
    newer = (
        ExternalCheckpoint.objects.for_tenant(run.tenant_id)
        .filter(run=run, checkpoint_ns=ROOT_NS, checkpoint_id__gt=checkpoint_id)
        .exists()
    )
    if newer:
        return  # a late write of a step the graph has already moved past
    found = interrupts or [{"id": f"{checkpoint_id}:{task_id}", "value": None}]
    ids = [str(i.get("id"))[:200] for i in found]
    # The same task interrupting with something else: what it asked before is moot.
    _close(
        run,
        Q(checkpoint_id=checkpoint_id, task_id=task_id) & ~Q(interrupt_id__in=ids),
        REINTERRUPTED,
    )
    for interrupt, interrupt_id in zip(found, ids, strict=True):
        row, created = GraphInterrupt.objects.get_or_create(
            tenant_id=run.tenant_id,
            run=run,
            interrupt_id=interrupt_id,
            defaults={"checkpoint_id": checkpoint_id, "task_id": task_id, "node": node},
        )
        if created:
            _open_request(run, row, interrupt.get("value"))


def _open_request(run: Run, row: GraphInterrupt, value: Any) -> None:
    """`interrupt({"action", "arguments", "reason"})`: an approval request in the inbox
    (through the registered pause handler, so the tenant's policies apply), for the amount in
    its arguments (`_judged_amount`)."""
    if not isinstance(value, dict) or not isinstance(value.get("action"), str):
        return  # an interrupt for something else: the graph's own business
    request_id = request_id_for(run, row.interrupt_id)
    GraphInterrupt.objects.filter(pk=row.pk).update(request_id=request_id)
    Run.objects.filter(pk=run.pk).update(wake_payload=None)
    given = value.get("arguments")
    extensions.pause_handler("approval")(
        extensions.Pause(
            id=request_id,
            tenant_id=run.tenant_id,
            run_id=run.pk,
            checkpoint_seq=_asking_step(run, row.checkpoint_id),
            step=row.node or run.current_step,
            action=value["action"][:100],
            arguments=given if isinstance(given, dict) else {},
            reason=str(value.get("reason") or "")[:2000],
            amount=_judged_amount(value),
            due_at=None,
        )
    )


def _judged_amount(value: Any) -> Decimal | None:
    """The amount a policy judges: the one in the arguments (`arguments["amount"]`), never a
    number the graph declares beside them, which must then be the same. Without one, a person
    decides whatever the policy's threshold. Not a positive sum: InvalidAmount."""
    if not isinstance(value, dict) or not isinstance(value.get("action"), str):
        return None
    given = value.get("arguments")
    in_arguments = parse_amount(given.get("amount") if isinstance(given, dict) else None)
    declared = parse_amount(value.get("amount"))
    if declared is not None and in_arguments is not None and declared != in_arguments:
        raise AmountMismatch(
            f"The interrupt declares {declared} but its arguments say {in_arguments}.",
            detail={"amount": str(declared), "arguments.amount": str(in_arguments)},
        )
    return in_arguments


def parse_amount(raw: Any) -> Decimal | None:
    """A positive amount of money (a number, or a number written as text), to the cent."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float | str | Decimal):
        raise InvalidAmount(detail={"amount": repr(raw)[:100]})
    try:
        amount = Decimal(str(raw).strip()[:50])
    except InvalidOperation:
        raise InvalidAmount(detail={"amount": str(raw)[:100]}) from None
    if not amount.is_finite() or amount > MAX_AMOUNT:
        raise InvalidAmount(detail={"amount": str(raw)[:100]})
    amount = amount.quantize(CENT, rounding=ROUND_HALF_UP)
    if amount <= 0:
        raise InvalidAmount(detail={"amount": str(raw)[:100]})
    return amount


def _asking_step(run: Run, checkpoint_id: str) -> int:
    """The number of the step that asked: the one after the interrupted checkpoint (whose
    interrupt write may arrive before the checkpoint itself, which is then the next one)."""
    found = (
        ExternalCheckpoint.objects.for_tenant(run.tenant_id)
        .filter(run=run, checkpoint_ns=ROOT_NS, checkpoint_id=checkpoint_id)
        .values_list("shown_as__seq", flat=True)
        .first()
    )
    if found is None:
        found = Run.objects.filter(pk=run.pk).values_list("step_seq", flat=True)[0] + 1
    return found + 1


def _resumed(run: Run, checkpoint_id: str, ids: list[str]) -> None:
    """The graph was given resume values (`Command(resume=...)`) at `checkpoint_id`: the
    interrupts they answer are answered, whoever decided; a request still pending was not
    what resumed it, so it closes."""
    rows = GraphInterrupt.objects.for_tenant(run.tenant_id).filter(
        run=run, checkpoint_id__lte=checkpoint_id, closed_at__isnull=True, answered_at__isnull=True
    )
    if ALL not in ids:
        rows = rows.filter(interrupt_id__in=ids)
    pending = [str(r) for r in rows.values_list("request_id", flat=True) if r is not None]
    rows.update(answered_at=timezone.now())
    if pending:
        extensions.pauses_closed.send(
            sender=Run, tenant_id=run.tenant_id, run_id=run.pk, pause_ids=pending, why=RESUMED_OWN
        )


def _close(run: Run, which: Q, why: str) -> None:
    rows = GraphInterrupt.objects.for_tenant(run.tenant_id).filter(
        which, run=run, closed_at__isnull=True
    )
    closing = list(rows.values_list("pk", "request_id"))
    if not closing:
        return
    GraphInterrupt.objects.filter(pk__in=[pk for pk, _ in closing]).update(closed_at=timezone.now())
    pending = [str(r) for _, r in closing if r is not None]
    if pending:
        extensions.pauses_closed.send(
            sender=Run, tenant_id=run.tenant_id, run_id=run.pk, pause_ids=pending, why=why
        )


def names(nodes: list[str]) -> str:
    """How the next nodes read as a step: "a, b" (at most 100 characters)."""
    return ", ".join(str(n) for n in nodes)[:100]
