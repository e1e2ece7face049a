"""The chat on the conversations pages: an end user talks to the tenant's agents as themselves.

Roles: admin, manager, member, viewer of tenant A; the outsider is an admin of tenant B.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agents.live.render import chat_feed
from agents.presenters import chat_pages
from agents.runtime.definitions import get_agent
from agents.runtime.engine.runner import drive
from agents.runtime.models import AgentSession, Message, Run
from agents.runtime.services import messages_append
from memory.facts.remember import fact_remember
from memory.models import Category
from tenants.scope import tenant_scope
from tests import factories

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
ASK = "Please refund $40 for order A-1002"


def rows(model, tenant, **filters) -> list:
    with tenant_scope(tenant.pk):
        return list(model.objects.for_tenant(tenant).filter(**filters).order_by("pk"))


def text_of(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def start_chat(client: Client, message: str = ASK, *, headers=None, **extra):
    data = {"agent": "refund_desk", "message": message} | extra
    return client.post("/conversations/new/", data, **(headers or {}))


def finish(run: Run) -> None:
    """The run answered (the engine's part is tested elsewhere)."""
    with tenant_scope(run.tenant_id):
        Run.objects.for_tenant(run.tenant_id).filter(pk=run.pk).update(status="succeeded")


@pytest.fixture
def chat_of(client_for, members, tenant_a, enqueued):
    """A conversation the member opened with the refund desk, and its first run."""
    response = start_chat(client_for("member"))
    assert response.status_code == 302
    [run] = rows(Run, tenant_a)
    [session] = rows(AgentSession, tenant_a)
    return session, run


# --- sending a message ----------------------------------------------------------------------------


def test_a_member_sends_a_message_and_a_run_starts_in_a_new_conversation_as_themselves(
    client_for, members, tenant_a, enqueued
):
    response = start_chat(client_for("member"))
    [run] = rows(Run, tenant_a)
    [session] = rows(AgentSession, tenant_a)
    assert response.status_code == 302
    assert response["Location"] == f"/conversations/{session.pk}/"
    member = members["member"].user
    assert (run.agent, run.session_id, run.created_by) == ("refund_desk", session.pk, member)
    assert run.input == {"customer": member.username, "message": ASK}
    assert (session.user, session.agent, session.title) == (member, "refund_desk", ASK)
    [message] = rows(Message, tenant_a)
    assert (message.role, message.content, message.run_id) == ("user", ASK, run.pk)


def test_the_start_form_offers_the_desks_starter_messages_and_one_click_starts_with_it(
    client_for, members, tenant_a, enqueued
):
    member = client_for("member")
    page = text_of(member.get("/conversations/"))
    starters = get_agent("refund_desk").starters
    assert "Or start with one of these" in page
    for text in starters:
        assert f'<input type="hidden" name="message" value="{text}">' in page

    response = member.post("/conversations/new/", {"agent": "refund_desk", "message": starters[0]})

    assert response.status_code == 302
    [run] = rows(Run, tenant_a)
    assert run.input["message"] == starters[0]


def test_with_htmx_the_chat_replaces_the_form_and_follows_the_run_live(
    client_for, tenant_a, enqueued
):
    response = start_chat(client_for("member"), headers=HX)
    [run] = rows(Run, tenant_a)
    html = text_of(response)
    assert response.status_code == 200
    assert response["HX-Push-Url"] == f"/conversations/{run.session_id}/"
    assert 'class="chat-log-region" role="log" aria-live="polite"' in html
    assert '<ol id="chat-log" class="chat-log">' in html
    assert ASK in html and f'id="reply-{run.pk}"' in html and "Getting started…" in html
    assert f'data-live="run" data-run="{run.pk}"' in html
    assert f'data-live="chat" data-filter="run={run.pk}"' in html
    assert 'ws-connect="/ws/live/"' in html and 'id="run-activity"' in html
    assert '<label for="chat-message">Your message</label>' in html
    # The conversations list below the chat shows the new conversation.
    assert (
        'id="conversation-list" aria-labelledby="conversations-heading" hx-swap-oob="true"' in html
    )
    assert f'href="/conversations/{run.session_id}/"' in html


def test_a_member_continues_the_conversation_with_a_new_run_in_the_same_session(
    client_for, members, tenant_a, enqueued, chat_of
):
    session, first = chat_of
    finish(first)
    response = client_for("member").post(
        f"/conversations/{session.pk}/messages/", {"message": "Thanks! Contact me by email."}, **HX
    )
    assert response.status_code == 200
    [run] = rows(Run, tenant_a, created_at__gt=first.created_at)
    username = members["member"].user.username
    assert run.session_id == session.pk
    assert run.input == {"customer": username, "message": "Thanks! Contact me by email."}
    said = [(m.seq, m.role, m.run_id) for m in rows(Message, tenant_a)]
    assert said == [(1, "user", first.pk), (2, "user", run.pk)]
    html = text_of(response)
    # A fresh form, and the message and the reply to come appended to the log.
    assert 'id="chat-form"' in html and '<div hx-swap-oob="beforeend:#chat-log">' in html
    assert 'id="chat-msg-2"' in html and f'id="reply-{run.pk}"' in html
    assert '<div id="chat-follow" hx-swap-oob="true">' in html and f'data-run="{run.pk}"' in html


def test_without_htmx_a_message_sends_the_member_back_to_the_conversation(
    client_for, tenant_a, enqueued, chat_of
):
    session, first = chat_of
    finish(first)
    response = client_for("member").post(
        f"/conversations/{session.pk}/messages/", {"message": "Hi"}
    )
    assert response.status_code == 302
    assert response["Location"] == f"/conversations/{session.pk}/"
    assert len(rows(Run, tenant_a, session=session)) == 2


def test_a_message_while_the_last_run_is_still_working_is_refused_inline(
    client_for, tenant_a, enqueued, chat_of
):
    session, _ = chat_of
    for headers in (HX, {}):
        response = client_for("member").post(
            f"/conversations/{session.pk}/messages/", {"message": "Hello?"}, **headers
        )
        assert response.status_code == 409
        html = text_of(response)
        assert 'id="chat-message-error" role="alert"' in html
        assert "still working on your last message" in html and "Hello?" in html
    assert len(rows(Run, tenant_a)) == 1 and len(rows(Message, tenant_a)) == 1


# --- the customer is the signed-in person ---------------------------------------------------------


def test_a_member_cannot_choose_another_customer_in_the_chat(
    client_for, members, tenant_a, enqueued
):
    start_chat(client_for("member"), customer="ada@example.com")
    [run] = rows(Run, tenant_a)
    assert run.input["customer"] == members["member"].user.username
    page = client_for("member").get("/conversations/").content.decode()
    assert 'name="customer"' not in page


def test_a_member_cannot_choose_another_customer_on_the_start_form(
    client_for, members, tenant_a, enqueued
):
    client = client_for("member")
    username = members["member"].user.username
    form = client.get("/runs/").content.decode()
    assert f'value="{username}"' in form and "ada@example.com" not in form
    response = client.post(
        "/runs/start/", {"agent": "refund_desk", "customer": "ada@example.com", "message": ASK}
    )
    assert response.status_code == 302
    [run] = rows(Run, tenant_a)
    assert run.input == {"customer": username, "message": ASK}


@pytest.mark.parametrize("who", ["admin", "manager"])
def test_managers_and_admins_keep_the_free_customer_field_to_test_agents(
    client_for, tenant_a, enqueued, who
):
    data = {"agent": "refund_desk", "customer": "ada@example.com", "message": ASK}
    assert client_for(who).post("/runs/start/", data).status_code == 302
    [run] = rows(Run, tenant_a)
    assert run.input["customer"] == "ada@example.com"


# --- who may do what ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "who, status", [("admin", 302), ("manager", 302), ("member", 302), ("viewer", 403)]
)
def test_starting_a_chat_follows_the_role_matrix(
    client_for, members, tenant_a, enqueued, who, status
):
    assert start_chat(client_for(who)).status_code == status
    made = rows(Run, tenant_a)
    assert len(made) == (status == 302)
    if made:
        assert made[0].input["customer"] == members[who].user.username


def test_the_outsider_chats_only_in_their_own_tenant(client_for, tenant_a, tenant_b, enqueued):
    assert start_chat(client_for("outsider")).status_code == 302
    assert rows(Run, tenant_a) == [] and len(rows(Run, tenant_b)) == 1


def test_a_viewer_reads_conversations_but_cannot_send(client_for, tenant_a, enqueued, chat_of):
    session, first = chat_of
    finish(first)
    viewer = client_for("viewer")
    listing = viewer.get("/conversations/").content.decode()
    assert "Talk to an agent" not in listing and "/conversations/new/" not in listing
    page = viewer.get(f"/conversations/{session.pk}/")
    assert page.status_code == 200 and ASK in page.content.decode()
    assert 'id="chat-form"' not in page.content.decode()
    reply = viewer.post(f"/conversations/{session.pk}/messages/", {"message": "Hi"})
    assert reply.status_code == 403
    assert len(rows(Run, tenant_a)) == 1


@pytest.mark.parametrize("who", ["admin", "manager"])
def test_others_read_a_members_conversation_but_only_the_member_writes_in_it(
    client_for, tenant_a, enqueued, chat_of, who
):
    session, first = chat_of
    finish(first)
    client = client_for(who)
    html = client.get(f"/conversations/{session.pk}/").content.decode()
    assert ASK in html and 'id="chat-form"' not in html
    assert "writes in this conversation; you can read it" in html
    response = client.post(f"/conversations/{session.pk}/messages/", {"message": "Hi"})
    assert response.status_code == 403
    assert len(rows(Run, tenant_a)) == 1


def test_another_tenants_conversation_is_404(client_for, tenant_a, enqueued, chat_of):
    session, first = chat_of
    finish(first)
    outsider = client_for("outsider")
    assert outsider.get(f"/conversations/{session.pk}/").status_code == 404
    response = outsider.post(f"/conversations/{session.pk}/messages/", {"message": "Hi"})
    assert response.status_code == 404
    assert len(rows(Run, tenant_a)) == 1


def test_another_members_conversation_is_404_to_a_member(client_for, members, tenant_a, enqueued):
    neighbour = Client()
    neighbour.force_login(factories.make_member(tenant_a, "member").user)
    start_chat(neighbour)
    [run] = rows(Run, tenant_a)
    finish(run)
    member = client_for("member")
    assert member.get(f"/conversations/{run.session_id}/").status_code == 404
    response = member.post(f"/conversations/{run.session_id}/messages/", {"message": "Hi"})
    assert response.status_code == 404
    assert ASK not in member.get("/conversations/").content.decode()


def test_sending_needs_the_csrf_token(members, tenant_a, enqueued):
    client = Client(enforce_csrf_checks=True)
    client.force_login(members["member"].user)
    response = client.post("/conversations/new/", {"agent": "refund_desk", "message": ASK})
    assert response.status_code == 403
    assert rows(Run, tenant_a) == []


def test_sending_accepts_only_post(client_for, chat_of):
    session, _ = chat_of
    assert client_for("member").get("/conversations/new/").status_code == 405
    assert client_for("member").get(f"/conversations/{session.pk}/messages/").status_code == 405


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, field, error",
    [
        ({"agent": "refund_desk", "message": ""}, "message", "Write a message first."),
        ({"agent": "refund_desk", "message": "   "}, "message", "Write a message first."),
        ({"agent": "refund_desk", "message": "x" * 2001}, "message", "at most 2000 characters"),
        ({"agent": "no_such_agent", "message": ASK}, "agent", "There is no agent with that name."),
        ({"message": ASK}, "agent", "Choose an agent to talk to."),
    ],
    ids=["empty", "blank", "too-long", "unknown-agent", "no-agent"],
)
def test_bad_input_to_a_new_chat_shows_the_form_again_with_the_error_inline(
    client_for, tenant_a, enqueued, data, field, error
):
    for headers in ({}, HX):
        response = client_for("member").post("/conversations/new/", data, **headers)
        assert response.status_code == 400
        html = text_of(response)
        assert f'id="chat-{field}-error" role="alert"' in html and error in html
        assert 'aria-invalid="true"' in html
        assert ("<html" in html) is (not headers)  # htmx gets the form partial only
    assert rows(Run, tenant_a) == [] and rows(AgentSession, tenant_a) == []
    assert rows(Message, tenant_a) == [] and enqueued == []


@pytest.mark.parametrize(
    "message, error",
    [("", "Write a message first."), ("x" * 2001, "at most 2000 characters")],
    ids=["empty", "too-long"],
)
def test_bad_input_to_a_conversation_shows_the_error_inline(
    client_for, tenant_a, enqueued, chat_of, message, error
):
    session, first = chat_of
    finish(first)
    for headers in ({}, HX):
        response = client_for("member").post(
            f"/conversations/{session.pk}/messages/", {"message": message}, **headers
        )
        assert response.status_code == 400
        html = text_of(response)
        assert 'id="chat-message-error" role="alert"' in html and error in html
    assert len(rows(Run, tenant_a)) == 1 and len(rows(Message, tenant_a)) == 1


def test_a_message_of_exactly_2000_characters_is_accepted(client_for, tenant_a, enqueued):
    assert start_chat(client_for("member"), message="x" * 2000).status_code == 302
    [session] = rows(AgentSession, tenant_a)
    assert len(session.title) <= 60


# --- what the chat shows --------------------------------------------------------------------------


def remember(run: Run, text: str, key: str = "", **fields):
    with tenant_scope(run.tenant_id):
        return fact_remember(
            tenant_id=run.tenant_id,
            subject_id=run.created_by_id,
            category=Category.PREFERENCE,
            text=text,
            key=key,
            source_session_id=run.session_id,
            source_run_id=run.pk,
            **fields,
        )


def test_the_facts_remembered_in_a_turn_are_listed_with_links_to_the_privacy_page(
    client_for, tenant_a, enqueued, chat_of
):
    session, first = chat_of
    fact = remember(first, "Prefers to be contacted by email", key="contact.channel")
    finish(first)
    html = client_for("member").get(f"/conversations/{session.pk}/").content.decode()
    reply = html[html.index(f'id="reply-{first.pk}"') :]
    link = f'<a href="/memory/#fact-{fact.pk}" id="chat-fact-{fact.pk}">'
    assert link + "Prefers to be contacted by email</a>" in reply
    assert "Remembered about you" in reply


def test_a_superseded_fact_is_no_longer_listed(client_for, tenant_a, enqueued, chat_of):
    session, first = chat_of
    old = remember(first, "Prefers to be contacted by email", key="contact.channel")
    new = remember(first, "Prefers to be contacted by phone", key="contact.channel")
    html = client_for("member").get(f"/conversations/{session.pk}/").content.decode()
    assert f"#fact-{new.pk}" in html and f"#fact-{old.pk}" not in html


def test_the_facts_are_listed_to_the_person_they_are_about_only(
    client_for, tenant_a, enqueued, chat_of
):
    session, first = chat_of
    fact = remember(first, "Prefers to be contacted by email")
    html = client_for("manager").get(f"/conversations/{session.pk}/").content.decode()
    assert str(fact.pk) not in html and "Prefers to be contacted" not in html


def test_the_progress_words_for_a_tools_step_come_from_the_agent_or_generic_words(
    client_for, tenant_a, enqueued, chat_of, monkeypatch
):
    session, run = chat_of
    drive(tenant_id=str(tenant_a.pk), run_id=run.pk, worker="w1", slice_seconds=0)
    with tenant_scope(tenant_a.pk):
        run = Run.objects.for_tenant(tenant_a).get(pk=run.pk)
        assert run.current_step == "tools"  # the model asked for billing_history
        # The demo gives its own words for its tools; without them, generic words.
        assert chat_pages.progress_words(run) == "checking your billing"
        monkeypatch.setattr(get_agent("refund_desk"), "progress_words", {}, raising=False)
        assert chat_pages.progress_words(run) == "working: billing history"
        monkeypatch.undo()
    html = client_for("member").get(f"/conversations/{session.pk}/").content.decode()
    assert "Checking your billing…" in html


def test_the_progress_words_say_what_a_run_waits_for(chat_of, tenant_a):
    _, run = chat_of
    assert chat_pages.progress_words(run) == "getting started"
    run.status, run.step_seq = "waiting_approval", 3
    assert chat_pages.progress_words(run) == "waiting for a manager"
    run.status, run.current_step = "running", "model"
    assert chat_pages.progress_words(run) == "thinking"
    run.current_step = "lookup"
    assert chat_pages.progress_words(run) == "working: lookup"
    run.status = "succeeded"
    assert chat_pages.progress_words(run) == ""


def test_a_finished_turn_shows_the_answer_and_the_page_follows_nothing(
    client_for, tenant_a, enqueued, chat_of
):
    session, run = chat_of
    with tenant_scope(tenant_a.pk):
        messages_append(
            tenant_id=tenant_a.pk,
            session_id=session.pk,
            run_id=run.pk,
            messages=[
                {"role": "assistant", "content": "", "tool_call": {"name": "billing_history"}},
                {"role": "tool", "content": "{}", "tool_call": {"name": "billing_history"}},
                {"role": "assistant", "content": "Done: 40.00 refunded for order A-1002."},
            ],
        )
    finish(run)
    html = client_for("member").get(f"/conversations/{session.pk}/").content.decode()
    reply = html[html.index(f'id="reply-{run.pk}"') :]
    assert "Done: 40.00 refunded for order A-1002." in reply
    assert "billing_history" not in html.split('id="chat-log"')[1].split("</ol>")[0]
    assert 'data-live="run"' not in html and 'id="run-activity"' not in html


def test_the_chat_feed_renders_the_reply_of_its_run_to_whoever_may_see_it(
    members, tenant_a, enqueued, chat_of
):
    session, run = chat_of
    member = factories.principal_for(members["member"])
    page = f"run={run.pk}"
    [html] = chat_feed(member, None, page)
    assert html.lstrip().startswith(f'<li id="reply-{run.pk}"') and "Getting started…" in html
    event = {"tenant_id": str(tenant_a.pk), "run_id": str(run.pk), "kind": "run.status"}
    assert chat_feed(member, event, page) == [html]
    assert chat_feed(member, {**event, "run_id": "another"}, page) == []
    assert chat_feed(member, None, "run=not-a-uuid") == []
    neighbour = factories.principal_for(factories.make_member(tenant_a, "member"))
    assert chat_feed(neighbour, event, page) == []
