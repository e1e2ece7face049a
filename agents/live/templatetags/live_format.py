"""Filters of the run pages: durations, epoch timestamps for the live clocks, event labels."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django import template
from django.urls import get_script_prefix, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from approvals.policies import refusal
from core import charts

register = template.Library()


# The one duration format (core/charts/base.py): "12.3 s" from seconds, "47 ms" from milliseconds.
register.filter("duration", charts.seconds)
register.filter("ms_duration", charts.millis)


_SPINNER = mark_safe('<span class="spinner" aria-hidden="true"></span>')
_RECOVERED = mark_safe(
    ' <span class="badge outcome-recovered" title="Its worker was lost; another one carried on'
    ' from the last checkpoint">Recovered automatically</span>'
)


@register.simple_tag(takes_context=True)
def status_badge(
    context: Any, run: Any = None, *, spinner: bool | None = None, plain: bool | None = None
) -> SafeString:
    """The run's status as a badge: `{% status_badge %}` (the context's `run`, `spinner` and
    `plain`) or `{% status_badge r spinner=True plain=True %}`. A lost worker's run waits for
    another one: not simply "Queued". Formatted, not rendered: every row of the runs lists
    has one."""
    run = context.get("run") if run is None else run
    plain = bool(context.get("plain")) if plain is None else plain
    spinner = bool(context.get("spinner")) if spinner is None else spinner
    if run.status == "queued" and run.lost_at:
        words = "Interrupted — resuming" if plain else "Worker lost — recovering"
        return format_html('<span class="badge status-lost">{}</span>', words)
    return format_html(
        '<span class="badge status-{}">{}{}</span>{}',
        run.status,
        _SPINNER if spinner and run.status == "running" else "",
        run.get_status_display(),
        _RECOVERED if run.recovered_at else "",
    )


_ANY_RUN = uuid.UUID(int=0)
_urls: dict[tuple[str, str], tuple[str, str]] = {}


@register.filter
def run_url(run_id: Any, view: str = "agents:run_detail") -> str:
    """A run's page (`{{ run.pk|run_url }}`, or `|run_url:"console:console_run"`), as
    `{% url view run.pk %}` gives it, reversed once per script prefix rather than per row."""
    key = (view, get_script_prefix())
    parts = _urls.get(key)
    if parts is None:
        head, _, tail = reverse(view, args=[_ANY_RUN]).partition(str(_ANY_RUN))
        parts = _urls[key] = (head, tail)
    return f"{parts[0]}{run_id}{parts[1]}"


_COPY_ID = (
    '<span class="copy-id"><code id="id-{0}" class="run-id">{0}</code> <button type="button"'
    ' class="copy" data-copy="{0}" aria-describedby="id-{0}" aria-live="polite" hidden>Copy'
    '<span class="visually-hidden"> the run id</span></button></span>'
)


@register.simple_tag
def run_id_copy(run: Any) -> SafeString:
    """The run's whole id with a button that copies it (static/js/copy.js)."""
    return format_html(_COPY_ID, run.pk)


@register.simple_tag
def run_took(run: Any) -> SafeString:
    """The runs lists' "took" cell: how long a finished run took, or what a live one has been
    doing for how long (a clock the page keeps going), from pages.dress_runs."""
    if run.took_s is not None:
        return format_html('<span class="narrow-only">took </span>{}', charts.seconds(run.took_s))
    if run.going_since:
        return format_html(
            '<span class="muted">{} for</span> <span class="clock" data-since="{}">{}</span>',
            run.going,
            epoch(run.going_since),
            charts.seconds(run.going_s),
        )
    return mark_safe('<span class="muted">—</span>')


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
