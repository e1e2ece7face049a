"""Threads that fork at a message: inherited context without copied rows, in the API and UI."""

from __future__ import annotations

import pytest

from agents.conversations.packing.build import build_context
from agents.runtime import services
from agents.runtime.errors import ForkPointInvalid
from agents.runtime.models import AgentSession, Message
from tenants.scope import tenant_scope
from tests import factories
from tests.agents.test_api import count, open_session, post

pytestmark = pytest.mark.django_db

SYSTEM = "You are a refund desk."


def say(session, *contents: str, role: str = "user") -> None:
    with tenant_scope(session.tenant_id):
        services.messages_append(
            tenant_id=session.tenant_id,
            session_id=session.pk,
            run_id=None,
            messages=[{"role": role, "content": c} for c in contents],
        )


def conversation(membership, *turns: str):
    """A session whose messages alternate user / assistant, in order."""
    session = open_session(membership)
    for index, content in enumerate(turns):
        say(session, content, role="user" if index % 2 == 0 else "assistant")
    return reload(session)


def reload(session) -> AgentSession:
    with tenant_scope(session.tenant_id):
        return (
            AgentSession.objects.for_tenant(session.tenant_id)
            .select_related("tenant")
            .get(pk=session.pk)
        )


def fork(session, at_seq, membership=None, **kwargs) -> AgentSession:
    principal = factories.principal_for(membership or factories.make_member(session.tenant))
    with tenant_scope(session.tenant_id):
        return services.session_fork(principal=principal, session=session, at_seq=at_seq, **kwargs)


def context(session) -> list[tuple[str, str]]:
    with tenant_scope(session.tenant_id):
        packed = build_context(
            tenant_id=session.tenant_id, session_id=session.pk, system=SYSTEM, memories=[]
        )
    return [(m["role"], m["content"]) for m in packed.messages]


@pytest.fixture
def member(members):
    return members["member"]


@pytest.fixture
def parent(member):
    return conversation(member, "refund $400 please", "which order?", "A-1001", "done", "thanks")


# --- the service ----------------------------------------------------------------------------------


def test_the_context_of_a_fork_equals_the_parents_up_to_the_fork_point_plus_its_own(member, parent):
    branch = fork(parent, 3, member)
    say(branch, "actually refund $40 instead")
    say(parent, "one more in the parent")  # after the fork point: not the fork's business
    expected = [("system", SYSTEM), *context(parent)[1:4], ("user", "actually refund $40 instead")]
    assert context(branch) == expected
    assert reload(branch).inherited_messages == 3


def test_forking_copies_no_message_rows(member, parent):
    before = count(Message, parent.tenant)
    branch = fork(parent, 2, member)
    assert count(Message, parent.tenant) == before
    assert count(Message, parent.tenant, session=branch) == 0
    assert [m[1] for m in context(branch)[1:]] == ["refund $400 please", "which order?"]


def test_a_fork_of_a_fork_walks_the_whole_parent_chain(member, parent):
    child = fork(parent, 4, member)
    say(child, "child says", role="user")
    grandchild = fork(reload(child), 1, member)
    say(grandchild, "grandchild says")
    assert [c for _, c in context(grandchild)[1:]] == [
        "refund $400 please",
        "which order?",
        "A-1001",
        "done",
        "child says",
        "grandchild says",
    ]
    assert reload(grandchild).inherited_messages == 5


@pytest.mark.parametrize("at_seq", [0, -1, 6, 99, "2", None, True, 2.0])
def test_a_fork_point_not_in_the_conversation_is_refused_and_creates_nothing(
    member, parent, at_seq
):
    before = count(AgentSession, parent.tenant)
    with pytest.raises(ForkPointInvalid) as raised:
        fork(parent, at_seq, member)
    assert raised.value.code == "fork_point_invalid" and raised.value.status == 400
    assert count(AgentSession, parent.tenant) == before


def test_a_fork_keeps_the_parents_summary_only_while_it_covers_inherited_messages(member, parent):
    with tenant_scope(parent.tenant_id):
        AgentSession.objects.for_tenant(parent.tenant_id).filter(pk=parent.pk).update(
            summary="The user wants $400 back.", summary_upto=2
        )
    parent = reload(parent)
    late, early = fork(parent, 4, member), fork(parent, 1, member)
    assert (late.summary, late.summary_upto) == ("The user wants $400 back.", 2)
    assert (early.summary, early.summary_upto) == ("", 0)
    assert context(late)[1][1].startswith("Summary of the earlier conversation")


# --- the API --------------------------------------------------------------------------------------


def url(session, what: str = "forks") -> str:
    return f"/api/v1/sessions/{session.pk}/{what}"


def test_the_api_forks_a_conversation_and_lists_and_reads_the_thread(client_for, parent):
    client = client_for("member")
    created = post(client, url(parent), {"at_seq": 2, "title": "try $40"})
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["parent"], body["fork_seq"], body["title"]) == (str(parent.pk), 2, "try $40")
    assert [f["id"] for f in client.get(url(parent)).json()] == [body["id"]]
    thread = client.get(f"/api/v1/sessions/{body['id']}/thread").json()
    assert [(m["position"], m["inherited"]) for m in thread["messages"]] == [(1, True), (2, True)]
    assert thread["ancestors"][0]["session"]["id"] == str(parent.pk)
    assert thread["ancestors"][0]["upto"] == 2


@pytest.mark.parametrize(
    "body, code",
    [
        ({"at_seq": 0}, "fork_point_invalid"),
        ({"at_seq": 6}, "fork_point_invalid"),
        ({"at_seq": "two"}, "invalid"),
        ({}, "invalid"),
        ({"at_seq": 1, "title": "x" * 201}, "invalid"),
    ],
)
def test_a_bad_fork_request_is_a_400_with_a_stable_code_and_changes_nothing(
    client_for, parent, body, code
):
    before = count(AgentSession, parent.tenant)
    response = post(client_for("member"), url(parent), body)
    assert response.status_code == 400
    assert response.json()["code"] == code and response.json()["message"]
    assert count(AgentSession, parent.tenant) == before


@pytest.mark.parametrize(
    "who, status", [("admin", 201), ("manager", 201), ("member", 201), ("viewer", 403),
                    ("outsider", 404)]
)  # fmt: skip
def test_forking_through_the_api_follows_the_role_matrix(client_for, parent, who, status):
    response = post(client_for(who), url(parent), {"at_seq": 1})
    assert response.status_code == status, response.json()


@pytest.mark.parametrize("what", ["forks", "thread"])
@pytest.mark.parametrize(
    "who, status", [("admin", 200), ("manager", 200), ("member", 200), ("viewer", 200),
                    ("outsider", 404)]
)  # fmt: skip
def test_reading_forks_and_threads_follows_the_role_matrix(client_for, parent, what, who, status):
    assert client_for(who).get(url(parent, what)).status_code == status


def test_another_members_conversation_is_404_to_a_member(client_for, members, tenant_a):
    others = conversation(factories.make_member(tenant_a), "mine", "yes")
    assert post(client_for("member"), url(others), {"at_seq": 1}).status_code == 404
    assert client_for("member").get(url(others, "thread")).status_code == 404


# --- the pages ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "who, status", [("admin", 200), ("manager", 200), ("member", 200), ("viewer", 200),
                    ("outsider", 404)]
)  # fmt: skip
def test_the_conversation_page_shows_the_thread_and_its_forks_by_role(
    client_for, member, parent, who, status
):
    branch = fork(parent, 3, member, title="the $40 branch")
    response = client_for(who).get(f"/conversations/{parent.pk}/")
    assert response.status_code == status
    if status == 200:
        html = response.content.decode()
        assert "the $40 branch" in html and "refund $400 please" in html
        assert ("/fork/" in html) == (who != "viewer")
        listing = client_for(who).get("/conversations/").content.decode()
        assert str(branch.pk) in listing


def test_the_fork_page_shows_inherited_messages_with_where_they_come_from(
    client_for, member, parent
):
    branch = fork(parent, 2, member)
    html = client_for("member").get(f"/conversations/{branch.pk}/").content.decode()
    assert "inherited" in html and f"/conversations/{parent.pk}/" in html
    assert "A-1001" not in html  # after the fork point


@pytest.mark.parametrize(
    "who, status", [("admin", 302), ("manager", 302), ("member", 302), ("viewer", 403),
                    ("outsider", 404)]
)  # fmt: skip
def test_forking_from_the_page_follows_the_role_matrix(client_for, parent, who, status):
    before = count(AgentSession, parent.tenant)
    response = client_for(who).post(f"/conversations/{parent.pk}/fork/", {"at_seq": "2"})
    assert response.status_code == status
    assert count(AgentSession, parent.tenant) == before + (status == 302)


def test_a_fork_point_not_in_the_conversation_shows_the_page_again_with_the_error(
    client_for, parent
):
    before = count(AgentSession, parent.tenant)
    response = client_for("member").post(f"/conversations/{parent.pk}/fork/", {"at_seq": "9"})
    assert response.status_code == 400
    assert "is not in this conversation" in response.content.decode()
    assert count(AgentSession, parent.tenant) == before
