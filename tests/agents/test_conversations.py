"""Conversations: messages are rows, seen by the next step, never lost to a busy agent."""

from __future__ import annotations

import pytest

from agents.runtime.errors import SessionBusy
from agents.runtime.models import AgentSession, Message, Run
from agents.runtime.services import message_post, session_create
from tenants.scope import tenant_scope

pytestmark = pytest.mark.django_db(transaction=True)


def transcript(session) -> list[tuple[int, str, str]]:
    with tenant_scope(session.tenant_id):
        return list(
            Message.objects.for_tenant(session.tenant_id)
            .filter(session=session)
            .order_by("seq")
            .values_list("seq", "role", "content")
        )


def test_a_message_that_arrives_between_steps_is_seen_by_the_next_step(
    admin, step, reload, enqueued
):
    with tenant_scope(admin.tenant.pk):
        session = session_create(principal=admin, agent="chat")
        _, run = message_post(principal=admin, session=session, content="refund please")
    assert step(run, slice_seconds=0).status == "queued"  # greeted, then yielded
    with tenant_scope(admin.tenant.pk):
        _, same_run = message_post(principal=admin, session=session, content="order A-1001")
    assert same_run.pk == run.pk  # queued to the working run, not a new one
    assert step(run).status == "succeeded"
    assert reload(run).output == {"heard": ["refund please", "order A-1001"]}
    assert transcript(session) == [
        (1, "user", "refund please"),
        (2, "assistant", "hello, what do you need?"),
        (3, "user", "order A-1001"),
        (4, "assistant", "you said: refund please | order A-1001"),
    ]


def test_an_agent_that_rejects_messages_while_running_answers_409_and_writes_nothing(
    admin, enqueued
):
    from agents.runtime.engine import store

    with tenant_scope(admin.tenant.pk):
        session = session_create(principal=admin, agent="strict_chat")
        _, run = message_post(principal=admin, session=session, content="first")
    store.claim(tenant_id=str(admin.tenant.pk), run_id=run.pk, worker="w", lease_seconds=60)
    with tenant_scope(admin.tenant.pk), pytest.raises(SessionBusy):
        message_post(principal=admin, session=session, content="second")
    assert [c for _, _, c in transcript(session)] == ["first"]
    with tenant_scope(admin.tenant.pk):
        assert Run.objects.for_tenant(admin.tenant).count() == 1
        assert AgentSession.objects.for_tenant(admin.tenant).get().last_seq == 1


def test_a_message_after_the_run_finished_starts_a_new_run(admin, step, enqueued):
    with tenant_scope(admin.tenant.pk):
        session = session_create(principal=admin, agent="chat")
        _, first = message_post(principal=admin, session=session, content="one")
    step(first)
    with tenant_scope(admin.tenant.pk):
        _, second = message_post(principal=admin, session=session, content="two")
    assert second.pk != first.pk and second.session_id == session.pk


def test_a_new_run_in_a_conversation_keeps_the_input_of_the_one_before(admin, step, enqueued):
    from agents.runtime.services import conversation_start

    with tenant_scope(admin.tenant.pk):
        first = conversation_start(
            principal=admin, agent="chat", message="one", input={"customer": "ada@example.com"}
        )
    step(first)
    with tenant_scope(admin.tenant.pk):
        session = AgentSession.objects.for_tenant(admin.tenant).get(pk=first.session_id)
        _, second = message_post(principal=admin, session=session, content="two")
    assert second.pk != first.pk
    assert second.input == {"customer": "ada@example.com", "message": "two"}
