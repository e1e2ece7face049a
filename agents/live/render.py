"""What a subscription sends: the pages' own partials, rendered for the subscriber.

Every function here is synchronous, reads inside the subscriber's tenant context, and
returns websocket messages: HTML whose top-level elements htmx's ws extension swaps in by
id. Sections are replaced whole (`hx-swap-oob="true"`); timeline entries, transcript
messages, event-log lines and runs-list rows go into their list through an
`hx-swap-oob="beforeend:#list"` wrapper, which static/js/live.js turns into an upsert (an
element already on the page is replaced in place), so an update shown twice is harmless.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404, QueryDict
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.html import escape

from agents.live.access import Refused
from agents.live.templatetags.live_format import run_seq_marker
from agents.presenters import chat_pages, context_record, pages, waterfall
from agents.presenters.forms import RunFilterForm
from agents.runtime import selectors
from agents.runtime.models import FINISHED, Run, RunEventLog
from tenants.principal import Principal
from tenants.scope import tenant_scope

RUN = "agents/run_detail.html"
RUNS = "agents/runs.html"
CONTEXT = "agents/_packed_context.html#packed-context"
CATCH_UP_LIMIT = 500  # events per message; a longer gap is sent in several
DURABLE_FINISHED = {str(s) for s in FINISHED}


@dataclass
class RunView:
    """What one socket's run page shows: the run as last rendered, and its last event."""

    principal: Principal
    run_id: str
    after: int
    run: Run | None = None


@dataclass
class _Ops:
    """Updates of one message, one per element id, each at its first mention."""

    items: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (list id, op)

    def upsert(self, container: str, element_id: str) -> None:
        self.items.setdefault(element_id, (container, "upsert"))

    def delete(self, container: str, element_id: str) -> None:
        self.items[element_id] = (self.items.get(element_id, (container, ""))[0], "delete")


def _scoped(principal: Principal):
    return tenant_scope(principal.tenant.pk, user_id=getattr(principal.user, "pk", None))


def _visible_run(principal: Principal, run_id: Any) -> Run:
    try:
        return selectors.runs_for(principal).select_related("created_by").get(pk=run_id)
    except (Run.DoesNotExist, ValueError, TypeError, ValidationError, Http404):
        raise Refused(f"run {run_id} is not visible to {principal.label}") from None


# --- one run --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunUpdate:
    """What brings a run page from one event to the present, the same for every socket of
    one viewer class (agents/live/hub.py): the run as it is, the last event shown, the
    rendered update, and whether a step that finished packed a context (each socket then
    adds the context record it may see)."""

    run: Run
    upto: int
    html: str
    packed: bool


def run_update(principal: Principal, run_id: str, after: int) -> RunUpdate:
    """The update after event `after` of the run, as `principal` may see it (Refused if it
    may not see the run); `upto` is `after` and `html` empty when there is nothing new."""
    with _scoped(principal):
        # Events first, then the run and the rest: each statement sees the commits made
        # before it, so what is rendered is at least as new as the last event it answers.
        events = list(
            RunEventLog.objects.for_tenant(principal.tenant)
            .filter(run_id=run_id, seq__gt=after)
            .order_by("seq")[:CATCH_UP_LIMIT]
        )
        run = _visible_run(principal, run_id)  # nothing leaves if this refuses
        if not events:
            return RunUpdate(run, after, "", False)
        finished = {
            e.data.get("step_seq") for e in events if e.kind == "step.finished" and e.data
        } - {None}
        packed = bool(finished) and selectors.packed_contexts(run).filter(seq__in=finished).exists()
        view = RunView(principal=principal, run_id=run_id, after=after, run=run)
        return RunUpdate(run, events[-1].seq, _run_batch(view, run, events), packed)


def run_messages(view: RunView, update: RunUpdate) -> list[str]:
    """One socket's messages for an update: the shared part, the context record this socket
    may see (only when a step packed one), and the socket's own clock. Moves `view` on."""
    view.run = update.run
    if update.upto <= view.after:
        return []  # nothing this page lacks
    html = update.html
    if update.packed:
        with _scoped(view.principal):
            records = context_record.records_for(view.principal, update.run)
        html += render_to_string(CONTEXT, {"run": update.run, "records": records}) + "\n"
    view.after = update.upto
    return [html + _seq_marker(update.run, update.upto)]


def run_catch_up(view: RunView) -> list[str]:
    """Messages bringing a page that shows events up to `view.after` to the present (one
    socket on its own: a subscription, or a test)."""
    return run_messages(view, run_update(view.principal, view.run_id, view.after))


def run_activity(view: RunView, event: dict[str, Any]) -> list[str]:
    """The worker's live activity (an LLM call and its tokens) for the run as last rendered."""
    run = view.run
    if run is None or run.is_finished:
        return []
    context = {
        "run": run,
        "progress": pages.progress(run),
        "activity": {"kind": event["kind"], "text": event.get("text", "")},
    }
    return [render_to_string(f"{RUN}#run-activity", context)]


def _run_batch(view: RunView, run: Run, events: list[RunEventLog]) -> str:
    ops = _Ops()
    sections: set[str] = set()
    step_seqs: set[int] = set()
    message_seqs: set[int] = set()
    current = run.step_seq + 1
    for event in events:
        ops.upsert("run-events", f"event-{event.seq}")
        data = event.data or {}
        n = data.get("step_seq")
        if event.kind == "step.started" and n:
            ops.upsert("timeline", f"step-{n}")
        elif event.kind == "step.failed" and n:
            ops.upsert("timeline", f"step-{n}")
            sections.update({"run-io", "run-ledger"})
        elif event.kind == "step.finished" and n:
            ops.upsert("timeline", f"step-{n}")
            sections.update({"run-ledger", "run-state"})
            if data.get("status") in DURABLE_FINISHED:
                sections.add("run-io")  # the output, or the error
            else:
                ops.upsert("timeline", f"step-{n + 1}")
            if data.get("status") != "running":
                sections.add("run-waterfall")  # the run stopped or waits: a new span begins
        elif event.kind == "run.lost" and n:
            # the lost attempt, and the "recovering" note, on the step it interrupted
            ops.upsert("timeline", f"step-{n}")
            sections.add("run-waterfall")
        elif event.kind == "run.status" or event.kind.startswith("approval."):
            ops.upsert("timeline", f"step-{current}")
            sections.update({"run-io", "run-approvals", "run-waterfall"})
        elif event.kind == "message.appended" and data.get("message_seq"):
            first = int(data["message_seq"])
            for seq in range(first, int(data.get("last_message_seq") or first) + 1):
                ops.upsert("transcript", f"msg-{seq}")
    for element_id in ops.items:
        if element_id.startswith("step-"):
            step_seqs.add(int(element_id[5:]))
        elif element_id.startswith("msg-"):
            message_seqs.add(int(element_id[4:]))
    context = {
        **pages.summary_context(run),
        "principal": view.principal,
        # An end user reads what happened in plain words: no hosts, processes or codes.
        "plain": view.principal.sees_only_own,
        "now": timezone.now(),
        # Shared by every socket on the run, so no per-user CSRF input: forms on a live page
        # submit through htmx, which sends the token as a header (<body hx-headers>).
        "live": True,
    }
    rendered: dict[str, str] = {}
    entries = {s.seq: s for s in pages.steps(run, only=step_seqs)} if step_seqs else {}
    for seq in step_seqs:
        if seq in entries:
            rendered[f"step-{seq}"] = render_to_string(
                f"{RUN}#step", {**context, "s": entries[seq]}
            )
        else:  # no longer on the page (cancelled before it ran): remove it if it is there
            ops.delete("timeline", f"step-{seq}")
    if message_seqs and run.session_id:
        for m in pages.messages(run, seqs=message_seqs):
            rendered[f"msg-{m.seq}"] = render_to_string(f"{RUN}#message", {**context, "m": m})
    for event in events:
        rendered[f"event-{event.seq}"] = render_to_string(f"{RUN}#event", {"e": event})
    parts = _list_updates(ops, rendered)
    parts += _sections(run, sections, context)
    return "\n".join(parts) + "\n"


def _list_updates(ops: _Ops, rendered: dict[str, str]) -> list[str]:
    """Consecutive updates of the same list share one wrapper."""
    groups: list[tuple[str, list[str]]] = []
    for element_id, (container, op) in ops.items.items():
        if op == "delete":
            html = f'<template id="{escape(element_id)}" data-live-delete></template>'
        elif element_id in rendered:
            html = rendered[element_id]
        else:
            continue  # e.g. a message of another session: nothing to show
        if not groups or groups[-1][0] != container:
            groups.append((container, []))
        groups[-1][1].append(html)
    return [
        f'<div hx-swap-oob="beforeend:#{container}">{"".join(items)}</div>'
        for container, items in groups
    ]


def _sections(run: Run, names: set[str], context: dict[str, Any]) -> list[str]:
    parts: list[str] = [render_to_string(f"{RUN}#run-summary", context)]
    if "run-io" in names:
        parts.append(render_to_string(f"{RUN}#run-io", {**context, **pages.io_context(run)}))
    if "run-state" in names:
        state = pages.latest_state(run)
        parts.append(render_to_string(f"{RUN}#run-state", {**context, "state": state}))
    if "run-ledger" in names:
        calls = pages.tool_calls(run)
        parts.append(render_to_string(f"{RUN}#run-ledger", {**context, "tool_calls": calls}))
    approvals = pages.approvals(run) if names & {"run-approvals", "run-waterfall"} else []
    if "run-approvals" in names:
        audit = pages.audit_trail(run, approvals)
        parts.append(
            render_to_string(
                f"{RUN}#run-approvals", {**context, "approvals": approvals, "audit": audit}
            )
        )
    if "run-waterfall" in names:
        chart = waterfall.run_waterfall(
            run, pages.steps(run), approvals, context["now"], plain=context["plain"]
        )
        parts.append(render_to_string(f"{RUN}#run-waterfall", {**context, "waterfall": chart}))
    return parts


def _seq_marker(run: Run, seq: int) -> str:
    """Per socket, never shared: it carries the server's clock for the page's timers. The
    page shows events up to `seq`, even if the row has moved on."""
    return run_seq_marker(run, timezone.now(), seq)


# --- the runs list --------------------------------------------------------------------------------


@dataclass
class RunsView:
    """One socket's runs list: its filter and the rows it shows."""

    principal: Principal
    filter: str
    shown: set[str] = field(default_factory=set)

    def form(self) -> RunFilterForm:
        return RunFilterForm(QueryDict(self.filter))


def runs_snapshot(view: RunsView) -> list[str]:
    """The table and the counts as they are now (on subscribe, and after a reconnect)."""
    with _scoped(view.principal):
        table, _ = pages.runs_table(view.principal, view.form())
        counts = selectors.status_counts(view.principal)
    view.shown = {str(run.pk) for run in table["runs"]}
    context = {"principal": view.principal}
    return [
        render_to_string(f"{RUNS}#runs-table", {**context, **table}),
        render_to_string(f"{RUNS}#run-counts", {**context, "counts": counts}),
    ]


@dataclass(frozen=True)
class RunsEvent:
    """What an event changes in runs lists, the same for every socket of one viewer class
    (agents/live/hub.py): the run as that class sees it (None: not theirs to see), its row,
    and the counts."""

    run: Run | None
    row: str = ""
    counts: str = ""


def runs_event(principal: Principal, event: dict[str, Any]) -> RunsEvent:
    run_id = str(event.get("run_id") or "")
    with _scoped(principal):
        found = selectors.runs_for(principal).select_related("created_by").filter(pk=run_id).first()
        if found is None:
            return RunsEvent(None)  # another member's run: nothing at all
        plain = principal.sees_only_own  # an end user's words (status badge, outcome)
        pages.dress_runs([found], plain=plain)
        row = render_to_string(f"{RUNS}#run-row", {"run": found, "plain": plain})
        if principal.sees_only_own:
            counts = selectors.status_counts(principal)  # her own runs
        else:  # the tenant's: the same for every socket watching it
            counts = selectors.tenant_status_counts_after(principal.tenant.pk, event)
    context = {"counts": counts, "principal": principal}
    return RunsEvent(found, row, render_to_string(f"{RUNS}#run-counts", context))


def runs_messages(view: RunsView, shared: RunsEvent, event: dict[str, Any]) -> list[str]:
    """One socket's messages: the run's row if its list shows it (or it is new and fits the
    filter), and the counts. No database: runs in the event loop."""
    if shared.run is None:
        return []
    run_id = str(event.get("run_id") or "")
    messages: list[str] = []
    fits = event.get("kind") == "run.queued" and pages.run_matches(shared.run, view.form())
    if run_id in view.shown or fits:
        view.shown.add(run_id)
        messages.append(f'<tbody hx-swap-oob="afterbegin:#runs-tbody">{shared.row}</tbody>')
    messages.append(shared.counts)
    return messages


def runs_update(view: RunsView, event: dict[str, Any]) -> list[str]:
    """The run's row (if the list shows it, or it is new and fits the filter) and the counts."""
    return runs_messages(view, runs_event(view.principal, event), event)


# --- tenant feeds (the approvals inbox and its badge) ---------------------------------------------

Feed = Callable[..., list[str]]
FEEDS: dict[str, Feed] = {}


@dataclass
class FeedView:
    """One socket's tenant feed: who subscribed, and what the page shows (`data-filter` of
    the subscribing element: a query string, or None when the page names nothing)."""

    principal: Principal
    page: str | None = None


def register_feed(kind: str, render: Feed) -> Feed:
    """Let another app render a tenant feed: `render(principal, event, page)` returns
    messages; `event` is None on subscribe and after a reconnect (send the current state
    then), `page` is what the subscribing element names (`data-filter`), or None. It is
    asked about every committed event of the tenant (runs' status changes too): return []
    for what the page does not show."""
    FEEDS[kind] = render
    return render


def feed_messages(kind: str, view: FeedView, event: dict[str, Any] | None) -> list[str]:
    return FEEDS[kind](view.principal, event, view.page)


# --- the chat (agents/web/chat.py) ----------------------------------------------------------------

CHAT = "agents/chat.html"


def chat_feed(principal: Principal, event: dict[str, Any] | None, page: str | None) -> list[str]:
    """The reply to one turn of a conversation (`page`: "run=<uuid>", the run the chat
    follows): what the run is doing in plain words, its answer, the facts it remembered. The
    model's words as they stream come with the page's run subscription (`run_activity`)."""
    run_id = _chat_run(page)
    if run_id is None or (event is not None and str(event.get("run_id")) != run_id):
        return []  # another run (of this tenant): nothing for this page
    with _scoped(principal):
        try:
            run = _visible_run(principal, run_id)
        except Refused:
            return []  # another member's run: not even that something happened
        context = chat_pages.reply_context(principal, run)
        html = render_to_string(f"{CHAT}#chat-reply", {**context, "follow": run})
    return [html]


def _chat_run(page: str | None) -> str | None:
    try:
        return str(uuid.UUID(QueryDict(page or "").get("run", "")))
    except ValueError:
        return None
