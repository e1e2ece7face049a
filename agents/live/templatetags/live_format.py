"""Filters of the run pages: durations, epoch timestamps for the live clocks, event labels."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from approvals.policies import refusal
from core import charts

register = template.Library()


# The one duration format (core/charts/base.py): "12.3 s" from seconds, "47 ms" from milliseconds.
register.filter("duration", charts.seconds)
register.filter("ms_duration", charts.millis)


@register.filter
def epoch(when: dt.datetime | None) -> str:
    """Seconds since the epoch, for the page's live clocks (data-since)."""
    return "" if when is None else f"{when.timestamp():.3f}"


@register.filter
def seconds_until(since: dt.datetime | None, now: dt.datetime | None) -> float | None:
    return None if since is None or now is None else (now - since).total_seconds()


def _step(data: dict[str, Any]) -> str:
    return f"step {data.get('step_seq', '?')} {data.get('step', '')}".rstrip()


@register.filter
def event_label(event: Any) -> str:
    """One line for the run page's event log."""
    data: dict[str, Any] = event.data or {}
    kind = event.kind
    if kind == "run.queued":
        return "Run queued"
    if kind == "step.started":
        if data.get("recovered"):
            by = f" by {data['worker']}" if data.get("worker") else ""
            return (
                f"Recovered automatically{by}: {_step(data)} "
                f"(attempt {data.get('attempt', '?')}) continues from the last checkpoint"
            )
        return f"Worker started {_step(data)} (attempt {data.get('attempt', 1)})"
    if kind == "run.lost":
        ran = f", seen alive {charts.millis(data['ran_ms'])} into it" if data.get("ran_ms") else ""
        return (
            f"Worker {data.get('worker') or '?'} lost during {_step(data)} "
            f"(attempt {data.get('attempt', '?')}{ran}); queued again for another worker"
        )
    if kind == "step.finished":
        if data.get("duration_ms") is None:  # saved by a graph that runs elsewhere: not timed
            return f"Checkpoint saved after {_step(data)}"
        took = charts.millis(data.get("duration_ms"))
        after = {
            "running": f"next: {data.get('next_step')}",
            "queued": f"next: {data.get('next_step')} (queued)",
            "waiting_approval": "waiting for approval",
            "waiting_timer": "sleeping",
            "waiting_event": "waiting for an event",
        }.get(data.get("status", ""), data.get("status", ""))
        return f"Finished {_step(data)} in {took}; {after}"
    if kind == "step.failed":
        error = (data.get("error") or {}).get("code", "error")
        then = "will retry" if data.get("outcome") == "retrying" else "run failed"
        return f"Attempt {data.get('attempt', '?')} at {_step(data)} failed ({error}); {then}"
    if kind == "run.status":
        return f"Status changed to {data.get('status', '?').replace('_', ' ')}"
    if kind == "approval.requested":
        status = data.get("status")
        return "Approval requested" + (f" ({status})" if status and status != "pending" else "")
    if kind == "approval.decided":
        return f"Approval {data.get('status', 'decided')}"
    if kind == "approval.escalated":
        return "Approval escalated to the tenant's admins"
    if kind == "message.appended":
        first, last, role = (
            data.get("message_seq", ""),
            data.get("last_message_seq"),
            data.get("role", "?"),
        )
        if last:
            return f"Messages {first} to {last} from the {role}"
        return f"Message {first} from the {role}"
    if kind == "memory.written":
        return "Memory written"
    return kind


@register.filter
def event_label_plain(event: Any) -> str:
    """The event log's line for an end user: what happened in their words, without workers,
    hosts, processes or error codes (staff read event_label)."""
    data: dict[str, Any] = event.data or {}
    kind = event.kind
    if kind == "step.started":
        if data.get("recovered"):
            return "Recovered automatically: carrying on from where it stopped"
        return f"Working on step {data.get('step_seq', '?')}"
    if kind == "run.lost":
        return "Something went wrong on our side; we are retrying"
    if kind == "step.failed":
        if data.get("outcome") == "retrying":
            return "Something went wrong on our side; we are retrying"
        return "Something went wrong on our side; the request stopped"
    if kind == "step.finished":
        return f"Step {data.get('step_seq', '?')} done"
    return event_label(event)


@register.filter
def refusal_for(approval: Any, principal: Any) -> str | None:
    """Why `principal` may not decide this approval (its policy: role, group, four eyes), or
    None if they may: the run page offers Approve/Reject only to those the service accepts."""
    return refusal(principal, approval) if principal is not None else "Not signed in."


@register.simple_tag
def run_seq_marker(run: Any, now: dt.datetime | None, seq: int | None = None) -> SafeString:
    """The number of the last event a run page shows (sent back when its socket reconnects)
    and the server's clock for the page's timers: drawn with the page, and sent after every
    live update to each socket (agents/live/render.py), so it is formatted, not rendered."""
    return format_html(
        '<span id="run-seq" hidden data-live="run" data-run="{}" data-seq="{}"'
        ' data-now="{}"></span>',
        run.pk,
        run.event_seq if seq is None else seq,
        epoch(now),
    )
