"""The rolling summary: past N turns the older ones are folded in by the LLM, off the
request path, keeping what matters; the originals stay; doing it again changes nothing."""

from __future__ import annotations

import pytest

from agents.conversations import summary
from agents.conversations.packing.build import build_context
from agents.runtime import services
from agents.runtime.llm import ChatResult
from agents.runtime.models import AgentSession, Message
from tenants.scope import tenant_scope
from tests.agents.test_api import count, open_session

pytestmark = pytest.mark.django_db


class Recorder:
    """A model that answers with a fixed summary and remembers every prompt."""

    def __init__(self, reply: str = "The user wants refunds.", during=None) -> None:
        self.reply, self.during, self.prompts = reply, during, []

    def chat(self, messages, **_):
        self.prompts.append(messages)
        if self.during is not None:
            self.during()
        return ChatResult(content=self.reply)


def turns(session, n: int, start: int = 1) -> None:
    with tenant_scope(session.tenant_id):
        for i in range(start, start + n):
            services.messages_append(
                tenant_id=session.tenant_id,
                session_id=session.pk,
                run_id=None,
                messages=[
                    {"role": "user", "content": f"turn {i}: refund ${i}0 for order A-10{i:02d}"},
                    {"role": "assistant", "content": f"noted turn {i}"},
                ],
            )


def row(session) -> AgentSession:
    with tenant_scope(session.tenant_id):
        return AgentSession.objects.for_tenant(session.tenant_id).get(pk=session.pk)


def summarise(session, model) -> bool:
    return summary.session_summarise(
        tenant_id=session.tenant_id, session_id=session.pk, model=model
    )


@pytest.fixture
def session(members, settings):
    settings.AGENTSTATE_SUMMARY_KEEP_TURNS = 10
    return open_session(members["member"])


def test_ten_turns_or_fewer_are_not_summarised_and_the_model_is_not_called(session):
    turns(session, 10)
    model = Recorder()
    assert summarise(session, model) is False
    assert model.prompts == [] and row(session).summary_upto == 0


def test_past_ten_turns_the_older_ones_are_summarised_and_the_originals_kept(session):
    turns(session, 13)
    model = Recorder("The user asked for three refunds.")
    assert summarise(session, model) is True
    after = row(session)
    assert after.summary_upto == 6  # turns 1-3 (two messages each); the last 10 stay verbatim
    assert after.summary.startswith("The user asked for three refunds.")
    assert count(Message, session.tenant, session=session) == 26  # nothing deleted
    [prompt] = model.prompts
    assert "exact number" in prompt[0]["content"] and "open task" in prompt[0]["content"]
    assert "turn 3: refund $30" in prompt[1]["content"]
    assert "turn 4" not in prompt[1]["content"]


def test_numbers_the_user_gave_survive_even_when_the_model_drops_them(session):
    turns(session, 11)
    summarise(session, Recorder("The user wants a refund."))
    assert "Numbers the user gave: 1, $10, A-1001" in row(session).summary


def test_summarising_again_changes_nothing_and_calls_no_model(session):
    turns(session, 12)
    assert summarise(session, Recorder("first")) is True
    before = row(session)
    again = Recorder("second")
    assert summarise(session, again) is False
    assert again.prompts == []
    after = row(session)
    assert (after.summary, after.summary_upto, after.summary_updated_at) == (
        before.summary,
        before.summary_upto,
        before.summary_updated_at,
    )


def test_the_summary_rolls_forward_from_the_previous_one(session):
    turns(session, 11)
    summarise(session, Recorder("first summary"))
    turns(session, 2, start=12)
    model = Recorder("second summary")
    assert summarise(session, model) is True
    assert "Previous summary:\nfirst summary" in model.prompts[0][1]["content"]
    assert row(session).summary_upto == 6


def test_two_summarisers_at_once_write_one_summary(session):
    turns(session, 12)
    inner = Recorder("inner wins")
    outer = Recorder("outer loses", during=lambda: summarise(session, inner))
    assert summarise(session, outer) is False  # the fold point moved while it was thinking
    assert row(session).summary.startswith("inner wins")


def test_the_context_sends_the_summary_instead_of_the_turns_it_covers(session):
    turns(session, 12)
    summarise(session, Recorder("Refunds asked: $10, $20."))
    with tenant_scope(session.tenant_id):
        packed = build_context(
            tenant_id=session.tenant_id, session_id=session.pk, system="sys", memories=[]
        )
    contents = [m["content"] for m in packed.messages]
    assert contents[1].startswith("Summary of the earlier conversation (messages 1-4")
    assert not any(c.startswith("turn 2:") for c in contents)
    assert contents[2].startswith("turn 3:")


def test_a_message_past_the_threshold_schedules_the_summary_after_commit_not_in_the_request(
    session, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    monkeypatch.setattr(
        "agents.conversations.tasks.enqueue_summary", lambda **kw: queued.append(kw)
    )
    monkeypatch.setattr(summary, "summary_model", lambda: pytest.fail("LLM in the request"))
    turns(session, 5)
    with django_capture_on_commit_callbacks(execute=True):
        turns(session, 1, start=6)  # 12 messages > 10: worth a look
    assert queued == [{"tenant_id": session.tenant_id, "session_id": session.pk}]


def test_the_celery_task_summarises_with_the_scripted_model(session):
    from agents.conversations.tasks import summarise_session

    turns(session, 11)
    result = summarise_session.apply(
        kwargs={"tenant_id": str(session.tenant_id), "session_id": str(session.pk)}
    )
    assert result.get() is True
    assert "turn 1: refund $10 for order A-1001" in row(session).summary


def test_the_scripted_summariser_keeps_decisions_constraints_numbers_and_open_tasks():
    text = summary.extractive_summary(
        summary.prompt(
            "",
            [
                {"role": "user", "content": "Hi there, lovely weather."},
                {"role": "user", "content": "My budget is $250 and it must ship by Friday."},
                {"role": "assistant", "content": "We decided to refund order A-1001."},
                {"role": "user", "content": "Please also check order A-1002 later."},
                {"role": "assistant", "content": "Sure thing."},
            ],
        )
    )
    assert "$250" in text and "must ship by Friday" in text
    assert "decided to refund order A-1001" in text and "check order A-1002" in text
    assert "lovely weather" not in text and "Sure thing" not in text
