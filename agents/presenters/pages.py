"""What the run pages show, read for the HTTP views and the websocket consumer alike.

Both render the same partials of `agents/run_detail.html` and `agents/runs.html` from these
contexts, so a page updated live looks exactly like the same page loaded fresh.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone

from agents.conversations import selectors as conversation_selectors
from agents.presenters import waterfall
from agents.presenters.forms import RunFilterForm
from agents.runtime import graph_runs, selectors
from agents.runtime.definitions import get_agent, run_summary
from agents.runtime.errors import AppError
from agents.runtime.models import (
    WAITING,
    AgentSession,
    AttemptOutcome,
    Checkpoint,
    Message,
    Run,
    RunEventLog,
    RunStatus,
    StepAttempt,
    ToolCall,
)
from approvals.models import ApprovalRequest
from core.confirm import Confirmation, Trigger
from core.paging import NEWEST_FIRST, paginate, position_encode
from tenants.models import AuditEvent
from tenants.principal import Principal

PAGE_SIZE = 50
EVENTS_SHOWN = 200  # the run page's event log shows the latest ones


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


# --- one run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recovery:
    """The claim that picked a run up again after the recovery sweep took it back from a
    worker that died holding it (its `step.started` event with `recovered`)."""

    at: dt.datetime
    worker: str
    attempt: int


@dataclass
class StepEntry:
    """One step of the timeline: its checkpoint (once written) and every attempt at it.

    `current` marks the step the run is on (running, queued or waiting); it is shown even
    before any attempt at it, so the page has an element to update when it starts.
    """

    seq: int
    step: str
    checkpoint: Checkpoint | None = None
    attempts: list[StepAttempt] = field(default_factory=list)
    current: bool = False
    since: dt.datetime | None = None  # when the current step started running
    recovering: bool = False  # its worker was lost; the run waits for another one

    @property
    def lost(self) -> bool:
        return any(a.outcome == AttemptOutcome.LOST for a in self.attempts)

    @property
    def took_ms(self) -> float | None:
        done = [a.duration_ms for a in self.attempts if a.outcome == "succeeded"]
        return done[-1] if done else None


def steps(run: Run, *, only: set[int] | None = None) -> list[StepEntry]:
    """The timeline (or only the entries numbered `only`), oldest first."""
    checkpoints = Checkpoint.objects.for_tenant(run.tenant_id).filter(run=run).defer("state")
    if only is not None:
        checkpoints = checkpoints.filter(seq__in=only)
    entries: dict[int, StepEntry] = {}
    found = list(checkpoints.order_by("seq"))
    for cp in found:
        entries[cp.seq] = StepEntry(seq=cp.seq, step=cp.step, checkpoint=cp)
    for attempt in selectors.step_attempts(run, found, only=only):
        entry = entries.setdefault(attempt.seq, StepEntry(seq=attempt.seq, step=attempt.step))
        entry.attempts.append(attempt)
    current = run.step_seq + 1
    if not run.is_finished and (only is None or current in only):
        entry = entries.setdefault(current, StepEntry(seq=current, step=run.current_step))
        entry.current = True
        entry.since = run.updated_at if run.status == RunStatus.RUNNING else None
        entry.recovering = run.status == RunStatus.QUEUED and run.lost_at is not None
    if any(entry.lost for entry in entries.values()):
        _pair_recoveries(run, entries)
    return [entries[seq] for seq in sorted(entries)]


def _pair_recoveries(run: Run, entries: dict[int, StepEntry]) -> None:
    """Set `recovery` on each lost attempt: the recovering claim after it (None until then).
    A claim belongs to the latest lost attempt at its step that ended before it."""
    for entry in entries.values():
        for attempt in entry.attempts:
            if attempt.outcome == AttemptOutcome.LOST:
                attempt.recovery = None  # type: ignore[attr-defined]
    for claim in selectors.recoveries(run):
        data = claim.data or {}
        at_step = entries.get(data.get("step_seq", -1))
        if at_step is None:
            continue
        before = [
            a
            for a in at_step.attempts
            if a.outcome == AttemptOutcome.LOST
            and a.recovery is None  # type: ignore[attr-defined]
            and a.ended_at <= claim.created_at
        ]
        if before:
            lost = max(before, key=lambda a: a.ended_at)
            lost.recovery = Recovery(  # type: ignore[attr-defined]
                at=claim.created_at,
                worker=str(data.get("worker", "")),
                attempt=int(data.get("attempt") or lost.attempt + 1),
            )


def step_entry(run: Run, seq: int) -> StepEntry | None:
    """One entry of the timeline, or None if the page does not show that step (any more)."""
    found = steps(run, only={seq})
    return found[0] if found else None


def progress(run: Run) -> dict[str, Any]:
    """Step n of m (m: steps the agent defines, an upper bound only for agents without
    loops), the current step and how long things took."""
    try:
        defined = len(get_agent(run.agent).steps)
    except AppError:
        defined = None
    if graph_runs.is_graph_run(run):
        defined = None  # its steps are the graph's nodes, not the agent's one placeholder
    number = run.step_seq if run.is_finished else run.step_seq + 1
    end = run.finished_at or timezone.now()
    return {
        "number": number,
        "defined": defined,
        "bar": defined is not None and not run.is_finished and number <= defined,
        "current": None if run.is_finished else run.current_step,
        # The run's current step started when its row last changed: claims and step commits
        # set updated_at, lease renewals do not.
        "running_since": run.updated_at if run.status == RunStatus.RUNNING else None,
        "elapsed_s": (end - run.started_at).total_seconds() if run.started_at else None,
    }


def latest_state(run: Run) -> str | None:
    """The state of the latest checkpoint, pretty, or None before the first one."""
    states = Checkpoint.objects.for_tenant(run.tenant_id).filter(run=run, seq=run.step_seq)
    found = list(states.values_list("state", flat=True)[:1])
    return pretty(found[0]) if found else None


def approvals(run: Run, errors: dict[Any, tuple[str | None, str]] | None = None) -> list:
    # A small read of the approvals app's table, scoped by tenant and run; the run itself was
    # resolved through run_for, so whoever sees the run may see its approvals.
    found = list(
        ApprovalRequest.objects.for_tenant(run.tenant_id).filter(run=run).order_by("-requested_at")
    )
    for approval in found:
        error, draft = (errors or {}).get(approval.pk, (None, ""))
        dress_approval(approval, error=error, draft=draft)
    return found


def dress_approval(approval: ApprovalRequest, *, error: str | None, draft: str) -> None:
    """What the approval partial shows beyond the row: pretty arguments, an error, a draft."""
    approval.arguments_json = pretty(approval.arguments)  # type: ignore[attr-defined]
    approval.error, approval.draft = error, draft  # type: ignore[attr-defined]


def messages(run: Run, *, seqs: set[int] | None = None) -> list[Message]:
    if not run.session_id:
        return []
    found = Message.objects.for_tenant(run.tenant_id).filter(session_id=run.session_id)
    if seqs is not None:
        found = found.filter(seq__in=seqs)
    result = list(found.order_by("seq"))
    for message in result:
        message.tool_call_json = pretty(message.tool_call)
        message.tool_result_json = pretty(message.tool_result)
    return result


def tool_calls(run: Run) -> list[ToolCall]:
    calls = list(ToolCall.objects.for_tenant(run.tenant_id).filter(run=run))
    for call in calls:
        call.result_json = pretty(call.result)
    return calls


def events(run: Run, *, after: int | None = None) -> list[RunEventLog]:
    """The run's events after number `after` (all of them: the latest EVENTS_SHOWN)."""
    found = RunEventLog.objects.for_tenant(run.tenant_id).filter(run=run)
    if after is not None:
        return list(found.filter(seq__gt=after).order_by("seq"))
    return list(reversed(found.order_by("-seq")[:EVENTS_SHOWN]))


def error_detail(error: Any) -> str | None:
    """The run's error beyond its code and message (class, step, attempt), if any."""
    if not isinstance(error, dict):
        return None if error is None else pretty(error)
    rest = {k: v for k, v in error.items() if k not in ("code", "message")}
    return pretty(rest) if rest else None


def io_context(run: Run) -> dict[str, Any]:
    return {
        "input": pretty(run.input),
        "output": None if run.output is None else pretty(run.output),
    }


def audit_trail(run: Run, approvals: list) -> list:
    """Audit events about the run and its approval requests (requests, decisions, edits,
    expiries, escalations), oldest first."""

    about = Q(target_type="agents.run", target_id=str(run.pk))
    if approvals:
        ids = [str(a.pk) for a in approvals]
        about |= Q(target_type="approvals.approvalrequest", target_id__in=ids)
    return list(AuditEvent.objects.for_tenant(run.tenant_id).filter(about).order_by("id")[:200])


def summary_context(run: Run) -> dict[str, Any]:
    return {
        "run": run,
        "progress": progress(run),
        "error_detail": error_detail(run.error),
        "cancel_trigger": cancel_confirmation(run).trigger,
    }


def cancel_confirmation(run: Run) -> Confirmation:
    """ "Cancel run" asks first, in the page (core.confirm)."""
    url = reverse("agents:run_cancel", args=[run.pk])
    return Confirmation(
        trigger=Trigger.make(url, "Cancel run"),
        question="Cancel this run?",
        detail="A step in progress finishes first; then the run stops for good.",
        confirm_label="Cancel run",
        keep_label="Keep it running",
        action_url=url,
        target="#run-live",
        back_url=reverse("agents:run_detail", args=[run.pk]),
    )


def run_context(
    run: Run,
    *,
    plain: bool = False,
    cancel_error: str | None = None,
    approval_errors: dict[Any, tuple[str | None, str]] | None = None,
) -> dict[str, Any]:
    """Everything the run page shows. `run` is read before the rest, so what the page shows
    is at least as new as `run.event_seq`, the number the live updates continue from. `plain`:
    for an end user, what happened in words, without workers, hosts or error codes."""
    run_approvals = approvals(run, approval_errors)
    timeline = steps(run)
    now = timezone.now()
    return {
        **summary_context(run),
        **io_context(run),
        "steps": timeline,
        "waterfall": waterfall.run_waterfall(run, timeline, run_approvals, now, plain=plain),
        "plain": plain,
        "tool_calls": tool_calls(run),
        "approvals": run_approvals,
        "audit": audit_trail(run, run_approvals),
        "transcript": messages(run),
        "state": latest_state(run),
        "events": events(run),
        "cancel_error": cancel_error,
        "now": now,
    }


# --- the runs list --------------------------------------------------------------------------------


def runs_table(principal: Principal, filters: RunFilterForm) -> tuple[dict[str, Any], int]:
    """One page of runs for the filter form (a bad filter is not applied), and the status
    code it deserves."""
    data = filters.applied()
    runs = selectors.runs_for(principal, status=data["status"] or None, agent=data["agent"] or None)
    page = paginate(
        # the rows show who started a run, never its conversation: no join to the session
        runs.select_related(None).select_related("created_by"),
        order=NEWEST_FIRST,
        after=data["before"] or None,
        limit=PAGE_SIZE,
    )
    keep = {k: data[k] for k in ("status", "agent") if data[k]}
    older = None
    if page.last is not None:
        cursor = position_encode(page.last.created_at, page.last.pk)
        older = "?" + urlencode({**keep, "before": cursor})
    live = {**keep, "before": filters.data.get("before", "")} if data["before"] else keep
    dress_runs(page.rows, plain=principal.sees_only_own)
    return {
        "filters": filters,
        "runs": page.rows,
        "older_url": older,
        "newest_url": ("?" + urlencode(keep)) if data["before"] else None,
        "only_own": principal.sees_only_own,
        "plain": principal.sees_only_own,  # words for end users ({% status_badge %})
        "live_filter": urlencode(live),
    }, 200 if filters.is_valid() else 400


# What an end user reads where staff read an error's code (they see our world, not theirs).
SOMETHING_WENT_WRONG = "something went wrong on our side"


def dress_runs(
    runs: list[Run], now: dt.datetime | None = None, *, plain: bool = False
) -> list[Run]:
    """What a row of the runs lists shows beyond the run's fields: its summary (`what`, and
    `outcome`: how it ended, or its error's code; for an end user, `plain`, words instead of
    the code), how long it took (`took_s`: started to finished) or what it has been doing
    (`going`) since when (`going_since`, `going_s`), and `retried` (more than one attempt at
    its current step)."""
    now = now or timezone.now()
    for run in runs:
        line = _summary(run)
        error = run.error.get("code") if isinstance(run.error, dict) else None
        failed = bool(error) and run.status == RunStatus.FAILED
        run.what = line.what  # type: ignore[attr-defined]
        run.outcome = line.outcome or (  # type: ignore[attr-defined]
            (SOMETHING_WENT_WRONG if plain else f"error: {error}") if failed else ""
        )
        run.took_s = _took_s(run)  # type: ignore[attr-defined]
        since = None if run.is_finished else run.started_at or run.created_at
        run.going_since = since  # type: ignore[attr-defined]
        run.going_s = (now - since).total_seconds() if since else None  # type: ignore[attr-defined]
        run.going = (  # type: ignore[attr-defined]
            "waiting" if run.status in WAITING else "running" if run.started_at else "queued"
        )
        run.retried = run.attempts > 1  # type: ignore[attr-defined]
        # The row's cells up to its outcome, kept ({% kept %}, core/fragments.py) under
        # every value they show: a run changed by any path gets a new key.
        run.row_key = (*shown_state(run), run.what, run.outcome, plain)  # type: ignore[attr-defined]
    return runs


def shown_state(run: Run) -> tuple[Any, ...]:
    """What the runs lists show of a run's state (its status badge and step): with its
    summary, the key its row's cells are kept under."""
    return (
        run.pk,
        run.agent,
        run.status,
        run.lost_at,
        run.recovered_at,
        run.attempts,
        run.current_step,
        run.step_seq,
    )


# A run's one line, by (run, version): its input and output change only with its version, and
# every list shows the same rows again and again (an agent's summary function can take 0.1 ms,
# 50 rows a page). Bounded; a deploy with another summary starts new processes.
_SUMMARIES: dict[tuple[Any, int], Any] = {}
_SUMMARIES_MOST = 20_000


def _summary(run: Run) -> Any:
    key = (run.pk, run.version)
    line = _SUMMARIES.get(key)
    if line is None:
        if len(_SUMMARIES) >= _SUMMARIES_MOST:
            _SUMMARIES.clear()
        line = _SUMMARIES[key] = run_summary(run.agent, run.input, run.output)
    return line


def _took_s(run: Run) -> float | None:
    """Started to finished, for a finished run that started (a run cancelled in the queue
    took nothing)."""
    if not run.is_finished or run.started_at is None or run.finished_at is None:
        return None
    return (run.finished_at - run.started_at).total_seconds()


def run_matches(run: Run, filters: RunFilterForm) -> bool:
    """Whether a new run belongs at the top of the list these filters show."""
    data = filters.applied()
    if data["before"]:
        return False
    return (not data["status"] or run.status == data["status"]) and (
        not data["agent"] or run.agent == data["agent"]
    )


# --- conversations and forks (agents/conversations/) ----------------------------------------------


# A conversation's forks, counted beside it (a subquery, not a join grouped by the session: the
# session's key is (id, tenant_id), tenants/distribution.py, so grouping by id alone is refused).
_forks = (
    AgentSession.objects.filter(parent=OuterRef("pk"), tenant=OuterRef("tenant"))
    .order_by()
    .values("parent")
    .annotate(n=Count("*"))
    .values("n")
)


def conversation_list(principal: Principal) -> dict[str, Any]:
    sessions = (
        selectors.sessions_for(principal)
        .select_related("user", "parent")
        .annotate(fork_count=Coalesce(Subquery(_forks), 0))[:PAGE_SIZE]
    )
    return {"sessions": list(sessions), "only_own": principal.sees_only_own}


def conversation_context(
    principal: Principal, session: Any, *, fork_error: str | None = None
) -> dict[str, Any]:
    """One conversation: its ancestry, the whole thread, its forks, runs and summary."""
    ancestry = conversation_selectors.thread_ancestors(session)
    owners = {str(a["session"].pk): a["session"] for a in ancestry}
    thread = conversation_selectors.thread(session)
    for message in thread:
        message["owner"] = owners.get(message["session"], session)
    return {
        "session": session,
        "ancestors": ancestry[:-1],
        "thread": thread,
        "forks": list(selectors.session_forks(principal, session).select_related("user")),
        "runs": list(selectors.runs_for(principal).filter(session=session)[:20]),
        "covered": session.summary_upto,
        "fork_error": fork_error,
    }
