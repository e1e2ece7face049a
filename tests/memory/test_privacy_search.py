"""The privacy page's search box, its overview by category, the link from each fact to where
it was learned, and deleting through the in-page confirmation (core/confirm.py).

Roles: admin, manager, member, viewer of tenant A; the outsider is an admin of tenant B.
The browser side (typing, the inline question, focus) is tests/e2e/test_privacy.py.
"""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from agents.runtime.models import AgentSession, Run
from memory.models import SourceKind
from tenants.models import AuditEvent
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import HX, embed_all, facts_of, remember, uses_model
from tests.memory.test_pages import grant_support

pytestmark = pytest.mark.django_db
WHO = ["admin", "manager", "member", "viewer", "outsider"]


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def shown_facts(response) -> list[str]:
    return re.findall(r'<p class="fact-text">(.*?)</p>', response.content.decode())


@pytest.fixture
def ada(members):
    """An end user of tenant A who has told the agents a few things."""
    ada = members["member"]
    remember(ada, "Prefers to be contacted by email", key="contact.channel")
    remember(ada, "Prefers morning appointments")
    remember(ada, "Lives in Lyon", category="profile")
    remember(ada, "Works as a nurse", category="profile")
    remember(ada, "Refund of 40.00 for order A-1002 was made", category="task_outcome")
    return ada


# --- searching ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_embeddings")
def test_a_search_by_word_shows_only_the_facts_that_match(client_for, ada):
    response = client_for("member").get("/memory/", {"q": "contacted"})
    assert response.status_code == 200
    assert shown_facts(response) == ["Prefers to be contacted by email"]
    assert "1 of 5 facts match “contacted”" in text(response)


@pytest.mark.usefixtures("no_embeddings")
def test_a_search_finds_word_stems_and_parts_of_words_as_they_are_typed(client_for, ada):
    client = client_for("member")
    assert shown_facts(client.get("/memory/", {"q": "contact"})) == [
        "Prefers to be contacted by email"  # the same stem
    ]
    assert shown_facts(client.get("/memory/", {"q": "Lyo"})) == ["Lives in Lyon"]  # typing
    assert sorted(shown_facts(client.get("/memory/", {"q": "prefers"}))) == [
        "Prefers morning appointments",
        "Prefers to be contacted by email",
    ]


@pytest.mark.usefixtures("no_embeddings")
def test_a_search_that_matches_nothing_says_so_and_offers_every_fact_again(client_for, ada):
    response = client_for("member").get("/memory/", {"q": "pigeons"})
    assert response.status_code == 200 and shown_facts(response) == []
    assert "Nothing matches" in text(response) and "No fact matches “pigeons”" in text(response)
    assert 'href="/memory/">Show every fact</a>' in text(response)
    assert "Nothing remembered" not in text(response)


@uses_model
@pytest.mark.slow
def test_a_search_by_meaning_finds_a_fact_that_shares_no_word_with_it(client_for, members):
    ada = members["member"]
    remember(ada, "Has a dog named Rex", category="profile")
    remember(ada, "Works as a nurse", category="profile")
    embed_all(ada)
    assert shown_facts(client_for("member").get("/memory/", {"q": "pet"})) == [
        "Has a dog named Rex"
    ]


@pytest.mark.usefixtures("no_embeddings")
def test_htmx_gets_the_list_alone_with_the_category_out_of_band_and_a_count_to_announce(
    client_for, ada
):
    response = client_for("member").get("/memory/", {"q": "nurse"}, **HX)
    html = response.content.decode()
    assert response.status_code == 200 and "Vary" in response and "HX-Request" in response["Vary"]
    assert html.lstrip().startswith('<div id="memory-list">') and "<main" not in html
    assert 'id="memory-category" name="category" value="" disabled hx-swap-oob="true"' in html
    assert shown_facts(response) == ["Works as a nurse"]
    message = json.loads(response["HX-Trigger"])["memory-searched"]["message"]
    assert message == "1 of 5 facts shown."


@pytest.mark.usefixtures("no_embeddings")
def test_the_page_keeps_a_plain_get_form_for_browsers_without_javascript(client_for, ada):
    page = text(client_for("member").get("/memory/", {"q": "lyon"}))
    form = re.search(r'<form method="get" action="/memory/" role="search".*?</form>', page).group(0)
    assert 'name="q" value="lyon"' in form and '<button type="submit">Search</button>' in form
    assert '<label for="memory-q">' in form


@pytest.mark.parametrize(
    "params,error,box_invalid",
    [
        ({"q": "x" * 201}, "Search for at most 200 characters.", True),
        ({"category": "Not A Category"}, "There is no such category.", False),
    ],
)
def test_a_bad_search_or_category_is_refused_inline_and_shows_nothing(
    client_for, ada, params, error, box_invalid
):
    response = client_for("member").get("/memory/", params)
    assert response.status_code == 400
    assert f'role="alert">{error}' in text(response) and shown_facts(response) == []
    box = re.search(r'<input type="search" id="memory-q"[^>]*>', text(response)).group(0)
    assert ('aria-invalid="true"' in box) == box_invalid
    assert ("memory-filter-error" in box) == box_invalid


@pytest.mark.usefixtures("no_embeddings")
def test_a_search_never_finds_another_persons_or_another_tenants_facts(
    client_for, members, outsider, ada
):
    remember(members["viewer"], "Lives in Lyon too", category="profile")
    remember(outsider, "Lives in Lyon as well", category="profile")
    for who in WHO:
        found = shown_facts(client_for(who).get("/memory/", {"q": "lyon"}))
        expected = {
            "member": ["Lives in Lyon"],
            "viewer": ["Lives in Lyon too"],
            "outsider": ["Lives in Lyon as well"],
        }
        assert found == expected.get(who, []), who


@pytest.mark.usefixtures("no_embeddings")
def test_support_staff_search_a_members_memories_and_each_search_is_audited(
    client_for, members, ada
):
    grant_support(members)
    client = client_for("manager")
    typed = client.get("/memory/", {"subject": ada.user_id, "q": "nurse"}, **HX)
    assert shown_facts(typed) == ["Works as a nurse"]
    response = client.get(f"/memory/?subject={ada.user_id}&q=lyon")
    assert shown_facts(response) == ["Lives in Lyon"]
    assert f'<input type="hidden" name="subject" value="{ada.user_id}">' in text(response)
    assert "Delete" not in "".join(re.findall(r'class="fact-actions".*?</div>', text(response)))
    with tenant_scope(ada.tenant_id):
        viewed = AuditEvent.objects.for_tenant(ada.tenant_id).filter(
            action="memory.support_viewed", target_id=str(ada.user_id)
        )
        assert sorted(e.after["q"] for e in viewed) == ["lyon", "nurse"]


# --- the overview by category ---------------------------------------------------------------------


def overview(response) -> list[tuple[str, str, bool]]:
    """(label, count, current) of each entry of the overview."""
    nav = re.search(r'<nav class="memory-overview".*?</nav>', text(response)).group(0)
    return [
        (label, count, "aria-current" in attrs)
        for attrs, count, label in re.findall(
            r'<a ([^>]*)><span class="count">(\d+)</span> <span class="label">(.*?)</span>', nav
        )
    ]


def test_the_overview_counts_the_facts_of_each_category_in_the_tenants_order(client_for, ada):
    assert overview(client_for("member").get("/memory/")) == [
        ("All categories", "5", True),
        ("Preferences", "2", False),
        ("About you", "2", False),
        ("Outcomes of past requests", "1", False),
    ]


@pytest.mark.usefixtures("no_embeddings")
def test_a_category_link_filters_the_list_and_keeps_the_search(client_for, ada):
    client = client_for("member")
    page = text(client.get("/memory/", {"q": "prefers"}))
    link = re.search(
        r'href="([^"]*)"[^>]*><span class="count">0</span> <span class="label">About', page
    )
    assert link.group(1) == "/memory/?q=prefers&amp;category=profile"
    about = client.get("/memory/", {"category": "profile"})
    assert sorted(shown_facts(about)) == ["Lives in Lyon", "Works as a nurse"]
    assert ("About you", "2", True) in overview(about)
    assert "2 of 5 facts in About you." in text(about)
    both = client.get("/memory/", {"category": "preference", "q": "email"})
    assert shown_facts(both) == ["Prefers to be contacted by email"]
    # With a search, each category says how many of its facts match, out of how many.
    assert ("Preferences", "1", True) in overview(both) and "of 2" in text(both)


def test_an_unknown_category_shows_an_empty_list_not_an_error(client_for, ada):
    response = client_for("member").get("/memory/", {"category": "diet"})
    assert response.status_code == 200 and shown_facts(response) == []
    assert "No fact is in diet." in text(response)


# --- links to where a fact was learned ------------------------------------------------------------


@pytest.fixture
def learned(ada):
    """A fact ada's conversation taught an agent: its session, its run and message 3."""
    with tenant_scope(ada.tenant_id):
        session = AgentSession.objects.create(
            tenant_id=ada.tenant_id, user=ada.user, agent="refund_desk", title="Refund A-1002"
        )
        run = Run.objects.create(
            tenant_id=ada.tenant_id,
            session=session,
            agent="refund_desk",
            agent_version=1,
            current_step="model",
            created_by=ada.user,
        )
    fact = remember(
        ada,
        "Prefers to be called after 6 pm",
        source_kind=SourceKind.CONVERSATION,
        source_session_id=session.pk,
        source_run_id=run.pk,
        source_message_seq=3,
    )
    return fact, session, run


def test_a_fact_links_to_the_message_and_the_run_it_came_from(client_for, learned):
    fact, session, run = learned
    page = text(client_for("member").get("/memory/"))
    item = re.search(rf'<li class="memory-fact" id="fact-{fact.pk}">.*?</li>', page).group(0)
    assert (
        f'Source: <a href="/conversations/{session.pk}/#pos-3">message 3 of “Refund A-1002”</a>'
        in item
    )
    assert f'<a href="/runs/{run.pk}/#msg-3">run <code>{str(run.pk)[:8]}</code></a>' in item


def test_a_message_of_a_fork_is_linked_at_its_place_in_the_thread(client_for, learned):
    fact, session, _ = learned
    with tenant_scope(session.tenant_id):
        AgentSession.objects.filter(pk=session.pk).update(inherited_messages=4)
    page = text(client_for("member").get("/memory/"))
    assert f'href="/conversations/{session.pk}/#pos-7"' in page  # 4 inherited, then its 3rd


def test_support_staff_see_the_source_links_they_may_open(client_for, members, learned):
    _, session, run = learned
    grant_support(members)
    page = text(client_for("manager").get(f"/memory/?subject={members['member'].user_id}"))
    assert f'href="/conversations/{session.pk}/#pos-3"' in page
    assert f'href="/runs/{run.pk}/#msg-3"' in page


def test_a_source_the_viewer_may_not_open_is_not_linked(client_for, members, learned):
    # Someone else's conversation taught the agent about ada (a member sees only their own).
    fact, session, run = learned
    other = factories.make_member(members["member"].tenant, "member")
    with tenant_scope(session.tenant_id):
        AgentSession.objects.filter(pk=session.pk).update(user=other.user)
        Run.objects.filter(pk=run.pk).update(created_by=other.user)
    page = text(client_for("member").get("/memory/"))
    assert "Prefers to be called after 6 pm" in page and "Learned in a conversation" in page
    assert f"/conversations/{session.pk}/" not in page and f"/runs/{run.pk}/" not in page
    assert "Source:" not in page


def test_a_privacy_links_session_gets_no_links_it_could_not_follow(learned):
    from memory.privacy import links

    fact, session, _ = learned
    with tenant_scope(fact.tenant_id):
        url, _ = links.link_make(tenant_id=fact.tenant_id, subject_id=fact.subject_id)
    client = Client()
    page = text(client.post(url, follow=True))
    assert "Prefers to be called after 6 pm" in page
    assert "/conversations/" not in page and "/runs/" not in page


# --- deleting asks first, inside the page ---------------------------------------------------------


@uses_model
@pytest.mark.slow
def test_delete_asks_inside_the_page_with_the_safe_choice_focused(client_for, ada):
    [fact] = [f for f in facts_of(ada, live_only=True) if f.text == "Lives in Lyon"]
    client = client_for("member")
    page = text(client.get("/memory/", {"q": "lyon"}))
    trigger = re.search(r'<a class="button danger confirm-trigger"[^>]*>.*?</a>', page).group(0)
    ask = f"/memory/facts/{fact.pk}/delete/?q=lyon"
    assert f'href="{ask}" hx-get="{ask}"' in trigger
    assert 'Delete<span class="visually-hidden"> the fact “Lives in Lyon”</span>' in trigger
    slot = re.search(r'id="(confirm-[0-9a-f]+)"', trigger).group(1)

    question = text(client.get(ask, **HX)).strip()
    assert question.startswith(f'<div class="confirm" id="{slot}" role="group"')
    assert f'aria-labelledby="{slot}-q"' in question and ">Delete this fact?</span>" in question
    assert f'hx-post="/memory/facts/{fact.pk}/delete/"' in question
    assert '<input type="hidden" name="q" value="lyon">' in question
    keep = re.search(r'<a class="button"[^>]*>Keep</a>', question).group(0)
    assert "autofocus" in keep and f'hx-target="#{slot}"' in keep
    assert "confirm(" not in question and "hx-confirm" not in question

    kept = text(client.get(f"{ask}&keep=1", **HX)).strip()
    assert kept.startswith(f'<a class="button danger confirm-trigger" id="{slot}"')
    assert "autofocus" in kept  # focus goes back to the Delete it replaced
    assert len(facts_of(ada, live_only=True)) == 5  # asking deletes nothing


@uses_model
@pytest.mark.slow
def test_without_javascript_delete_asks_on_a_page_and_comes_back_to_the_search(client_for, ada):
    [fact] = [f for f in facts_of(ada, live_only=True) if f.text == "Lives in Lyon"]
    client = client_for("member")
    page = client.get(f"/memory/facts/{fact.pk}/delete/?q=lyon")
    assert page.status_code == 200 and "<h1" in text(page) and "Delete this fact?" in text(page)
    assert f'<form method="post" action="/memory/facts/{fact.pk}/delete/">' in text(page)
    assert f'href="/memory/?q=lyon#fact-{fact.pk}">Keep</a>' in text(page)
    done = client.post(f"/memory/facts/{fact.pk}/delete/", {"q": "lyon"})
    assert done.status_code == 302 and done["Location"] == "/memory/?q=lyon"
    after = client.get(done["Location"])
    assert "Fact deleted." in text(after) and shown_facts(after) == []
    assert "Lives in Lyon" not in [f.text for f in facts_of(ada)]


@pytest.mark.usefixtures("no_embeddings")
def test_deleting_with_htmx_answers_the_filtered_list_with_focus_on_its_summary(client_for, ada):
    [fact] = [f for f in facts_of(ada, live_only=True) if f.text.startswith("Prefers to be")]
    response = client_for("member").post(
        f"/memory/facts/{fact.pk}/delete/", {"q": "prefers", "category": "preference"}, **HX
    )
    assert response.status_code == 200
    assert shown_facts(response) == ["Prefers morning appointments"]
    assert re.search(r'id="memory-summary" tabindex="-1" autofocus>1 of 4 facts', text(response))
    assert json.loads(response["HX-Trigger"])["memory-changed"]["message"] == "Fact deleted."


ASK_DELETE = {"admin": 404, "manager": 404, "member": 200, "viewer": 404, "outsider": 404}


@pytest.mark.parametrize("who", WHO)
def test_only_the_subject_is_asked_about_deleting_a_fact(client_for, members, ada, who):
    grant_support(members)  # support access is read-only: still 404
    fact = facts_of(ada, live_only=True)[0]
    assert client_for(who).get(f"/memory/facts/{fact.pk}/delete/").status_code == ASK_DELETE[who]
    assert (
        client_for(who).get(f"/memory/facts/{fact.pk}/delete/", **HX).status_code
        == (ASK_DELETE[who])
    )


def test_the_page_reads_the_tenants_category_rules_once(client_for, ada):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = client_for("member")
    with CaptureQueriesContext(connection) as statements:
        assert client.get("/memory/").status_code == 200
    rule_reads = [q for q in statements.captured_queries if "memory_memorypolicy" in q["sql"]]
    assert len(rule_reads) == 1
