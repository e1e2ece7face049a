"""Where a run's time went: its steps, waits, lost attempts and approval time on one time axis.

Everything comes from rows the run page reads anyway: the attempts of its steps (the
checkpoints for the ones that succeeded, StepAttempt rows for the failed, retried and lost
ones), the status each checkpoint left the run in (its step.finished event), and the run's
approval requests. Between two attempts the run was doing what the first one left it to do:
waiting for a person, a timer or an event, sitting in the queue, backing off before a retry,
or being recovered after its worker was lost.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils.safestring import SafeString

from agents.runtime import graph_runs
from agents.runtime.models import AttemptOutcome, Run, RunStatus, StepAttempt
from core import charts

KINDS = [
    charts.Series("step", "Step"),
    charts.Series("running", "Running now"),
    charts.Series("failed", "Failed attempt"),
    charts.Series("lost", "Lost attempt"),
    charts.Series("recovering", "Recovering from a lost worker"),
    charts.Series("approval", "Waiting for approval"),
    charts.Series("timer", "Sleeping until a time"),
    charts.Series("event", "Waiting for an event"),
    charts.Series("queued", "Queued for a worker"),
    charts.Series("backoff", "Backing off before a retry"),
    charts.Series("resume", "Waiting for the graph to resume"),
]
WAITS = {
    RunStatus.WAITING_TIMER: ("Sleeping", "timer"),
    RunStatus.WAITING_EVENT: ("Waiting for an event", "event"),
}
# How an attempt that wrote no checkpoint ended, in the table and the tooltips.
ENDED = {
    AttemptOutcome.RETRYING: "an error, retried",
    AttemptOutcome.FAILED: "an error, not retried",
    AttemptOutcome.FENCED: "superseded by another worker",
}
# Gaps between the steps of one drive are the engine's own overhead: not worth a row.
OVERHEAD_MS = 50.0
MAX_ROWS = 60


@dataclass(frozen=True)
class Total:
    kind: str
    label: str
    ms: float
    count: int


@dataclass(frozen=True)
class Waterfall:
    chart: SafeString
    totals: list[Total]
    elapsed_ms: float
    ongoing: bool


def run_waterfall(
    run: Run,
    steps: Sequence[Any],
    approvals: Iterable[Any],
    now: dt.datetime,
    *,
    plain: bool = False,
) -> Waterfall:
    """The run's waterfall chart and how long it spent on each kind of thing (`steps`: the
    run page's timeline entries, `approvals`: its approval requests; `plain`: for an end user,
    without workers or error codes)."""
    end = run.finished_at or now
    if graph_runs.is_graph_run(run):
        return _graph_waterfall(run, steps, list(approvals), end, now)
    timed = any(a.started_at is not None for e in steps for a in e.attempts)
    # Checkpoints without attempts were written elsewhere (a LangGraph thread through the API)
    # or by an admin's repair: nothing here says how long their steps took.
    untimed = not timed and any(getattr(e, "checkpoint", None) for e in steps)
    spans = [] if untimed else _spans(run, steps, list(approvals), end, now, plain)
    elapsed = _ms(run.created_at, end)
    totals = _totals(spans)
    chart = charts.waterfall(
        id=f"waterfall-{run.pk}",
        title="Steps, waits and approvals on one time axis",
        description=describe(totals, elapsed, finished=run.is_finished),
        spans=_fit(spans),
        total_ms=elapsed,
        kinds=KINDS,
        empty="This run's steps ran elsewhere: no step timings were recorded here."
        if untimed
        else "No step has run yet.",
    )
    return Waterfall(chart, totals, elapsed, ongoing=not run.is_finished)


def _graph_waterfall(
    run: Run, steps: Sequence[Any], approvals: list[Any], end: dt.datetime, now: dt.datetime
) -> Waterfall:
    """A LangGraph thread's run: its graph ran elsewhere and saved a checkpoint after each
    step, so each step is drawn from one checkpoint to the next, and an interrupt's wait
    for a person as a wait (then, once decided, the wait for the graph to resume)."""
    spans = _graph_spans(run, steps, approvals, now)
    elapsed = _ms(run.created_at, end)
    totals = _totals(spans)
    chart = charts.waterfall(
        id=f"waterfall-{run.pk}",
        title="Steps of the graph and its waits on one time axis",
        description=describe(totals, elapsed, finished=run.is_finished),
        spans=_fit(spans),
        total_ms=elapsed,
        kinds=KINDS,
        empty="The graph has saved no checkpoint yet.",
    )
    return Waterfall(chart, totals, elapsed, ongoing=not run.is_finished)


def _graph_spans(
    run: Run, steps: Sequence[Any], approvals: list[Any], now: dt.datetime
) -> list[charts.Span]:
    t0 = run.created_at
    saved = [e.checkpoint for e in steps if getattr(e, "checkpoint", None) is not None]
    drawn = {c.seq for c in saved[1:]} | ({saved[-1].seq + 1} if saved else set())
    asked = sorted(approvals, key=lambda a: a.requested_at)
    spans: list[charts.Span] = []
    for previous, checkpoint in zip(saved, saved[1:], strict=False):
        start, stop = previous.created_at, checkpoint.created_at
        label = f"Step {checkpoint.seq} · {checkpoint.step}"
        request = _asked_by(asked, checkpoint.seq, start, stop, drawn)
        spans += _graph_gap(label, request, t0, start, stop, ongoing=False)
    if saved and not run.is_finished:
        last = saved[-1]
        nodes = last.next_step or run.current_step
        label = f"Step {last.seq + 1} · {nodes}"
        request = _asked_by(asked, last.seq + 1, last.created_at, now, drawn)
        spans += _graph_gap(label, request, t0, last.created_at, now, ongoing=True)
    return spans


def _asked_by(
    asked: list[Any], seq: int, start: dt.datetime, stop: dt.datetime, drawn: set[int]
) -> Any:
    """The request step `seq` made (its interrupt); else one made meanwhile that no drawn
    step made (its interrupt's write may arrive before the checkpoint it belongs to)."""
    found = next((a for a in asked if a.checkpoint_seq == seq), None)
    if found is not None:
        return found
    loose = (a for a in asked if a.checkpoint_seq not in drawn)
    return next((a for a in loose if start <= a.requested_at <= stop), None)


def _graph_gap(
    label: str,
    request: Any,
    t0: dt.datetime,
    start: dt.datetime,
    stop: dt.datetime,
    *,
    ongoing: bool,
) -> list[charts.Span]:
    """From one checkpoint to the next: the node(s) running in the graph's process, or, if
    one asked for approval meanwhile, running until it asked, the wait for the decision, and
    the wait for the graph to resume with it."""
    where = "in the graph's process"
    if request is None:
        kind = "running" if ongoing else "step"
        return [_span(label, kind, t0, start, stop, where, ongoing=ongoing)]
    spans = []
    asked = min(max(start, request.requested_at), stop)  # its write may beat the checkpoint
    if _ms(start, asked) >= 1:
        spans.append(_span(label, "step", t0, start, asked, where))
    decided = request.decided_at if request.decided_at and request.decided_at <= stop else None
    if decided is None:
        note = f"{request.action}, pending"
        spans.append(
            _span(
                "Waiting for approval",
                "approval",
                t0,
                asked,
                stop,
                note,
                ongoing=ongoing,
            )
        )
        return spans
    who = request.decided_by_label or "the system"
    note = f"{request.action}, {request.get_status_display().lower()} by {who}"
    spans.append(_span("Waiting for approval", "approval", t0, asked, max(asked, decided), note))
    if _ms(decided, stop) >= 1:
        after = "until the graph's process resumed with the decision"
        spans.append(
            _span(
                "Waiting for the graph to resume",
                "resume",
                t0,
                decided,
                stop,
                after,
                ongoing=ongoing,
            )
        )
    return spans


def describe(totals: Sequence[Total], elapsed_ms: float, *, finished: bool) -> str:
    """The chart in words: the time from creation, and what filled it, biggest first."""
    head = f"{charts.millis(elapsed_ms)} from creation to {'the end' if finished else 'now'}"
    parts = [f"{t.label.lower()} {charts.millis(t.ms)}" for t in totals]
    return head + (": " + "; ".join(parts) if parts else "") + "."


# --- spans ----------------------------------------------------------------------------------------


def _spans(
    run: Run,
    steps: Sequence[Any],
    approvals: list[Any],
    end: dt.datetime,
    now: dt.datetime,
    plain: bool = False,
) -> list[charts.Span]:
    t0 = run.created_at
    statuses = {e.seq: e.checkpoint.status for e in steps if getattr(e, "checkpoint", None)}
    attempts = sorted(
        (a for e in steps for a in e.attempts if a.started_at is not None),
        key=lambda a: (a.started_at, a.seq, a.attempt),
    )
    spans: list[charts.Span] = []
    cursor, previous = t0, None
    for attempt in attempts:
        if attempt.started_at > cursor:
            spans += _between(previous, statuses, approvals, t0, cursor, attempt.started_at)
        spans.append(_attempt(attempt, t0, plain))
        cursor, previous = max(cursor, attempt.ended_at or attempt.started_at), attempt
    if run.status == RunStatus.RUNNING and run.updated_at and run.updated_at >= cursor:
        if run.updated_at > cursor:
            spans += _between(previous, statuses, approvals, t0, cursor, run.updated_at)
        label = f"Step {run.step_seq + 1} · {run.current_step}"
        spans.append(_span(label, "running", t0, run.updated_at, now, "in progress", ongoing=True))
    elif end > cursor:
        tail = _between(previous, statuses, approvals, t0, cursor, end, ongoing=not run.is_finished)
        spans += tail
    return spans


def _attempt(attempt: StepAttempt, t0: dt.datetime, plain: bool = False) -> charts.Span:
    label = f"Step {attempt.seq} · {attempt.step}"
    on = f" on {attempt.worker}" if attempt.worker and not plain else ""
    where = f"attempt {attempt.attempt}{on}"
    ended = attempt.ended_at or attempt.started_at
    if attempt.outcome == AttemptOutcome.SUCCEEDED:
        start = attempt.started_at
        # The checkpoint's duration is the step's own time; the rest was the commit.
        return _span(label, "step", t0, start, ended, where)
    if attempt.outcome == AttemptOutcome.LOST:
        ran = f"; ran {charts.millis(attempt.duration_ms)}" if attempt.duration_ms else ""
        return _span(label, "lost", t0, attempt.started_at, ended, f"{where}, worker lost{ran}")
    outcome = ENDED.get(AttemptOutcome(attempt.outcome), attempt.outcome)
    detail = None if plain else attempt.error_code or attempt.error_class
    note = f"{where}, {outcome}" + (f" ({detail})" if detail else "")
    return _span(label, "failed", t0, attempt.started_at, ended, note)


def _between(
    previous: StepAttempt | None,
    statuses: dict[int, str],
    approvals: list[Any],
    t0: dt.datetime,
    start: dt.datetime,
    end: dt.datetime,
    *,
    ongoing: bool = False,
) -> list[charts.Span]:
    """What the run did from `start` (the end of `previous`) to `end` (the next attempt)."""
    if previous is None:
        return [_span("Queued", "queued", t0, start, end, "waiting for a worker", ongoing=ongoing)]
    if previous.outcome == AttemptOutcome.LOST:
        note = "queued again for another worker"
        return [_span("Recovering", "recovering", t0, start, end, note, ongoing=ongoing)]
    if previous.outcome != AttemptOutcome.SUCCEEDED:
        return [_span("Back-off", "backoff", t0, start, end, "before the retry", ongoing=ongoing)]
    status = statuses.get(previous.seq, "")
    if status == RunStatus.WAITING_APPROVAL:
        return _approval_wait(previous, approvals, t0, start, end, ongoing=ongoing)
    if status in WAITS:
        label, kind = WAITS[RunStatus(status)]
        return [_span(label, kind, t0, start, end, f"after step {previous.seq}", ongoing=ongoing)]
    if status == RunStatus.QUEUED or _ms(start, end) >= OVERHEAD_MS:
        note = f"after step {previous.seq}"
        return [_span("Queued", "queued", t0, start, end, note, ongoing=ongoing)]
    return []


def _approval_wait(
    previous: StepAttempt,
    approvals: list[Any],
    t0: dt.datetime,
    start: dt.datetime,
    end: dt.datetime,
    *,
    ongoing: bool,
) -> list[charts.Span]:
    """The wait for a person's decision, then the queue until a worker resumed the run."""
    request = next((a for a in approvals if a.checkpoint_seq == previous.seq), None)
    if request is None:  # asked by another step, or made before this page knew: by time
        request = next((a for a in approvals if start <= a.requested_at <= end), None)
    decided = getattr(request, "decided_at", None)
    if request is None or decided is None or decided >= end:
        note = f"{request.action}, pending" if request is not None else "pending"
        return [_span("Waiting for approval", "approval", t0, start, end, note, ongoing=ongoing)]
    who = request.decided_by_label or "the system"
    note = f"{request.action}, {request.get_status_display().lower()} by {who}"
    spans = [_span("Waiting for approval", "approval", t0, start, max(start, decided), note)]
    if _ms(decided, end) >= 1:
        after = "after the decision"
        spans.append(
            _span("Queued", "queued", t0, max(start, decided), end, after, ongoing=ongoing)
        )
    return spans


def _span(
    label: str,
    kind: str,
    t0: dt.datetime,
    start: dt.datetime,
    end: dt.datetime,
    note: str = "",
    *,
    ongoing: bool = False,
) -> charts.Span:
    return charts.Span(label, kind, _ms(t0, start), _ms(t0, max(start, end)), note, ongoing)


def _ms(start: dt.datetime, end: dt.datetime) -> float:
    return max(0.0, (end - start).total_seconds() * 1000)


# --- totals and size ------------------------------------------------------------------------------


def _totals(spans: Sequence[charts.Span]) -> list[Total]:
    """Time and count per kind, biggest first."""
    labels = {k.key: k.label for k in KINDS}
    found: dict[str, list[float]] = {}
    for span in spans:
        found.setdefault(span.kind, []).append(span.ms)
    totals = [Total(k, _plural(labels[k], len(v)), sum(v), len(v)) for k, v in found.items()]
    return sorted(totals, key=lambda t: -t.ms)


def _plural(label: str, n: int) -> str:
    if label == "Step":
        return f"{n} step{'s' if n != 1 else ''}"
    return label


def _fit(spans: list[charts.Span]) -> list[charts.Span]:
    """At most MAX_ROWS rows: runs of consecutive successful steps become one row each, and
    if that is still too many, the newest rows are kept."""
    if len(spans) <= MAX_ROWS:
        return spans
    merged: list[charts.Span] = []
    group: list[charts.Span] = []
    for span in [*spans, None]:
        if span is not None and span.kind == "step":
            group.append(span)
            continue
        if len(group) == 1:
            merged.append(group[0])
        elif group:
            label = f"{len(group)} steps"
            busy = charts.millis(sum(s.ms for s in group))
            merged.append(
                charts.Span(label, "step", group[0].start_ms, group[-1].end_ms, f"{busy} working")
            )
        group = []
        if span is not None:
            merged.append(span)
    return merged[-MAX_ROWS:]
