"""The chat: an end user talks to the tenant's agents on the conversations pages.

A message starts a run of the conversation's agent with the input it expects, `{"customer":
<the signed-in person>, "message": ...}`, in the conversation (AgentSession), so the next
message's run reads the whole thread. The customer is never typed: it is who is signed in.
The reply streams into the page over the live websocket (agents/live/): the page follows the
newest run (kind "run": the model's words as they come) and the "chat" feed (what the run is
doing in plain words, its answer, the facts it remembered), rendered from `agents/chat.html`.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from agents.presenters import chat_pages, pages
from agents.presenters.forms import ChatMessageForm, ChatStartForm, agent_label, customer_for
from agents.runtime import selectors, services
from agents.runtime.definitions import get_agent
from agents.runtime.errors import AppError, SessionBusy
from agents.runtime.models import FINISHED, AgentSession, Message, MessageRole, Run
from tenants.errors import PermissionDenied
from tenants.models import Scope
from tenants.permissions import require_scope
from tenants.principal import Principal

CHAT = "agents/chat.html"
TITLE_CHARS = 60  # of the first message, which names a new conversation


# --- writes ---------------------------------------------------------------------------------------


@transaction.atomic
def conversation_open(*, principal: Principal, agent: str, message: str) -> Run:
    """A new conversation of the signed-in person with `agent`; its first message starts a run."""
    title = message if len(message) <= TITLE_CHARS else message[: TITLE_CHARS - 1].rstrip() + "…"
    return services.conversation_start(
        principal=principal,
        agent=agent,
        message=message,
        input={"customer": customer_for(principal)},
        title=" ".join(title.split()),
    )


@transaction.atomic
def conversation_continue(
    *, principal: Principal, session: AgentSession, message: str
) -> tuple[Message, Run]:
    """The next message of a conversation: a new run in it, once the last one has finished."""
    if principal.user is None or session.user_id != principal.user.pk:
        raise PermissionDenied("Only the person this conversation is with can write in it.")
    # The session row's lock makes two messages sent at once take turns: one starts a run,
    # the other sees it and is refused.
    sessions = AgentSession.objects.for_tenant(principal.tenant).select_for_update()
    list(sessions.filter(pk=session.pk).values_list("pk", flat=True))
    unfinished = Run.objects.for_tenant(principal.tenant).filter(session=session)
    if unfinished.exclude(status__in=FINISHED).exists():
        raise SessionBusy(
            "The agent is still working on your last message; write again when it has answered."
        )
    run = services.run_start(
        principal=principal,
        agent=session.agent,
        session=session,
        input={"customer": customer_for(principal), "message": message},
    )
    [said] = services.messages_append(
        tenant_id=principal.tenant.pk,
        session_id=session.pk,
        run_id=run.pk,
        messages=[{"role": MessageRole.USER, "content": message}],
    )
    return said, run


# --- views ----------------------------------------------------------------------------------------


@require_POST
@require_scope(Scope.WRITE)
def chat_start(request: HttpRequest) -> HttpResponse:
    """Open a conversation with the chosen agent; answer with its chat (htmx) or its page."""
    form = ChatStartForm(request.POST)
    run = None
    if form.is_valid():
        try:
            run = conversation_open(
                principal=request.principal,
                agent=form.cleaned_data["agent"],
                message=form.cleaned_data["message"],
            )
        except AppError as exc:
            form.add_error("agent", exc.message)
    if run is None:
        return _start_again(request, form)
    session = run.session
    url = reverse("agents:conversation_detail", args=[session.pk])
    if not request.htmx:
        return redirect(url)
    context = {
        **pages.conversation_list(request.principal),
        **chat_context(request, session),
        "focus": True,  # write on
    }
    response = render(request, f"{CHAT}#chat-started", context)
    response["HX-Push-Url"] = url
    return response


@require_POST
@require_scope(Scope.WRITE)
def chat_reply(request: HttpRequest, session_id: Any) -> HttpResponse:
    """Send the next message of a conversation; the log grows by it and the agent's reply."""
    session = selectors.session_for(request.principal, session_id)
    if not _chat_parts(request, session)["own"]:
        needed = "being the person this conversation is with"
        return render(request, "403.html", {"needed": needed}, status=403)
    form = ChatMessageForm(request.POST)
    sent, status = None, 400
    if form.is_valid():
        try:
            sent = conversation_continue(
                principal=request.principal, session=session, message=form.cleaned_data["message"]
            )
        except AppError as exc:
            form.add_error("message", exc.message)
            status = exc.status
    if not request.htmx:
        if sent is None:
            return _conversation_again(request, session, form, status)
        return redirect("agents:conversation_detail", session_id=session.pk)
    if sent is None:
        context = {**_chat_parts(request, session), "form": form, "focus": True}
        return render(request, f"{CHAT}#chat-form", context, status=status)
    message, run = sent
    entries = [
        chat_pages.Entry(message=message),
        chat_pages.Entry(reply=chat_pages.reply_for(request.principal, run)),
    ]
    context = {**_chat_parts(request, session), "entries": entries, "follow": run, "focus": True}
    return render(request, f"{CHAT}#chat-sent", context)


def _start_again(request: HttpRequest, form: ChatStartForm) -> HttpResponse:
    if request.htmx:
        return render(request, f"{CHAT}#chat-start", {"start_form": form}, status=400)
    context = {**pages.conversation_list(request.principal), "start_form": form}
    return render(request, "agents/conversations.html", context, status=400)


def _conversation_again(
    request: HttpRequest, session: AgentSession, form: ChatMessageForm, status: int
) -> HttpResponse:
    context = {
        **pages.conversation_context(request.principal, session),
        **chat_context(request, session),
        "form": form,
    }
    return render(request, "agents/conversation.html", context, status=status)


# --- what the pages show --------------------------------------------------------------------------


def start_context(request: HttpRequest) -> dict[str, Any]:
    """The conversations list's "talk to an agent" form, for those who may write."""
    writes = request.principal.can(Scope.WRITE)
    return {"start_form": ChatStartForm() if writes else None}


def chat_context(request: HttpRequest, session: AgentSession) -> dict[str, Any]:
    """The chat of one conversation: its log, the run the page follows, the reply form."""
    entries = chat_pages.chat_log(request.principal, session)
    runs = [e.reply.run for e in entries if e.reply is not None]
    return {
        **_chat_parts(request, session),
        "entries": entries,
        "follow": chat_pages.following(runs),
    }


def _chat_parts(request: HttpRequest, session: AgentSession) -> dict[str, Any]:
    principal = request.principal
    # Only the person the conversation is with writes in it (the customer is who writes),
    # and only to an agent that runs here (not a LangGraph thread's, say).
    own = principal.user is not None and session.user_id == principal.user.pk
    try:
        startable = get_agent(session.agent).startable
    except AppError:
        startable = False
    writes = own and startable and principal.can(Scope.WRITE)
    return {
        "session": session,
        "agent_label": agent_label(session.agent),
        "own": own,
        "startable": startable,
        "form": ChatMessageForm() if writes else None,
        "now": timezone.now(),
    }
