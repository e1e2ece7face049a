"""What the chat shows, read for the HTTP views (agents/web/chat.py) and the live feed
(`agents.live.render.chat_feed`) alike: both render the partials of `agents/chat.html`.

The log of a conversation is its user messages, each followed by the agent's reply to it: the
run that message started, shown as its answer once it has one, else as what it is doing in
plain words ("checking your billing…"), and the facts remembered in that turn as links to the
privacy page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from agents.presenters.forms import agent_label
from agents.runtime import selectors
from agents.runtime.definitions import get_agent
from agents.runtime.errors import AppError
from agents.runtime.models import (
    AgentSession,
    Checkpoint,
    Message,
    MessageRole,
    Run,
    RunStatus,
)
from memory.models import MemoryFact
from tenants.principal import Principal

# What any agent is doing, by the run's status: words an end user understands.
STATUS_WORDS = {
    RunStatus.QUEUED: "getting started",
    RunStatus.WAITING_APPROVAL: "waiting for a manager",
    RunStatus.WAITING_TIMER: "waiting until it is time to go on",
    RunStatus.WAITING_EVENT: "waiting for an answer from elsewhere",
}
# Steps every tool-calling agent has (agents/runtime/tool_agents.py); an agent's own words win.
STEP_WORDS = {"model": "thinking"}
ENDED_WORDS = {
    RunStatus.FAILED: "Something went wrong: the agent could not finish this.",
    RunStatus.CANCELLED: "This request was cancelled.",
}


@dataclass
class Reply:
    """The agent's side of one turn: the run its message started and what it said."""

    run: Run
    messages: list[Message] = field(default_factory=list)
    facts: list[MemoryFact] = field(default_factory=list)
    words: str = ""  # what the run is doing, while it is not finished

    @property
    def ended_words(self) -> str:
        """What to say about a run that ended without an answer."""
        if self.messages:
            return ""
        return ENDED_WORDS.get(self.run.status, "")


@dataclass
class Entry:
    """One item of the log: a user's message, or a reply."""

    message: Message | None = None
    reply: Reply | None = None


# --- progress in plain words ----------------------------------------------------------------------


def progress_words(run: Run) -> str:
    """What an unfinished run is doing, in words: the agent's `progress_words` for the tool it
    is calling or the step it is on, else generic words ("working: <step>")."""
    if run.is_finished:
        return ""
    if run.status in STATUS_WORDS and not (run.status == RunStatus.QUEUED and run.step_seq):
        return STATUS_WORDS[run.status]
    words = _agent_words(run.agent)
    for tool in _tools_called(run):
        return words.get(tool) or f"working: {_plain(tool)}"
    step = run.current_step
    return words.get(step) or STEP_WORDS.get(step) or f"working: {_plain(step)}"


def _agent_words(agent: str) -> dict[str, str]:
    """The agent definition's words for its steps and tools ({"billing_history": "checking
    your billing"}), if it gives any."""
    try:
        words = getattr(get_agent(agent), "progress_words", None)
    except AppError:
        return {}
    return dict(words) if isinstance(words, dict) else {}


def _tools_called(run: Run) -> list[str]:
    """The tools the run's current step is about to call: a tool-calling agent's pending calls
    (in its latest checkpoint's state) that have no result yet."""
    found = (
        Checkpoint.objects.for_tenant(run.tenant_id)
        .filter(run=run, seq=run.step_seq)
        .values_list("state__pending", "state__results")
        .first()
    )
    if found is None or not isinstance(found[0], list):
        return []
    pending, results = found
    done = results if isinstance(results, dict) else {}
    return [
        str(call["name"])
        for call in pending
        if isinstance(call, dict) and call.get("name") and call.get("id") not in done
    ]


def _plain(name: str) -> str:
    return name.replace("_", " ").replace("-", " ").strip()


# --- the log --------------------------------------------------------------------------------------


def chat_log(principal: Principal, session: AgentSession) -> list[Entry]:
    """The conversation's own messages, each user message followed by the reply of the run it
    started (tool calls and results are the run page's business, not the chat's)."""
    runs = {r.pk: r for r in selectors.runs_for(principal).filter(session=session)}
    replies = {pk: Reply(run=run) for pk, run in runs.items()}
    entries: list[Entry] = []
    placed: set[Any] = set()
    said = (
        Message.objects.for_tenant(session.tenant_id)
        .filter(session=session, role__in=(MessageRole.USER, MessageRole.ASSISTANT))
        .exclude(content="")
        .order_by("seq")
    )
    for message in said:
        reply = replies.get(message.run_id)
        if message.role == MessageRole.USER:
            entries.append(Entry(message=message))
            if reply is not None and message.run_id not in placed:
                placed.add(message.run_id)
                entries.append(Entry(reply=reply))
        elif reply is not None:
            reply.messages.append(message)
            if message.run_id not in placed:  # a run no user message started
                placed.add(message.run_id)
                entries.append(Entry(reply=reply))
        else:
            entries.append(Entry(message=message))
    for pk in sorted(set(runs) - placed, key=lambda pk: runs[pk].created_at):
        entries.append(Entry(reply=replies[pk]))
    _dress(principal, session, list(replies.values()))
    return entries


def reply_for(principal: Principal, run: Run) -> Reply:
    """One run's reply as the log shows it (the live feed re-renders it on every event)."""
    reply = Reply(run=run)
    if run.session_id is not None:
        reply.messages = list(
            Message.objects.for_tenant(run.tenant_id)
            .filter(session_id=run.session_id, run=run, role=MessageRole.ASSISTANT)
            .exclude(content="")
            .order_by("seq")
        )
        _dress(principal, run.session, [reply])
    return reply


def _dress(principal: Principal, session: AgentSession, replies: list[Reply]) -> None:
    """Progress words of the unfinished runs and the facts each turn remembered."""
    for reply in replies:
        reply.words = progress_words(reply.run)
    # The privacy page the links open shows the signed-in person's own facts: the facts are
    # listed to the person the conversation is with, and to nobody else.
    if principal.user is None or session.user_id != principal.user.pk or not replies:
        return
    by_run = {str(reply.run.pk): reply for reply in replies}
    facts = MemoryFact.objects.for_tenant(principal.tenant).filter(
        subject=principal.user, source_run_id__in=list(by_run), valid_until__isnull=True
    )
    for fact in facts.defer("embedding").order_by("created_at"):
        by_run[str(fact.source_run_id)].facts.append(fact)


def following(session_runs: list[Run]) -> Run | None:
    """The run the page follows live: the newest one, while it is not finished."""
    newest = max(session_runs, key=lambda r: r.created_at, default=None)
    return newest if newest is not None and not newest.is_finished else None


def reply_context(principal: Principal, run: Run) -> dict[str, Any]:
    """What `agents/chat.html#chat-reply` needs for one run (the live feed's render)."""
    return {
        "reply": reply_for(principal, run),
        "agent_label": agent_label(run.agent),
        "principal": principal,
        "now": timezone.now(),
    }
