"""The context record names the provider and model that really answered each packed call and
the remembered facts its memory items quoted (by id, never their text); the run page shows
the facts' text and links to them only to the person and to support with access.

Roles: admin, manager, member, viewer of tenant A (the member is the run's customer); the
outsider is an admin of tenant B.
"""

from __future__ import annotations

import json
import re

import pytest

from agents.conversations.packing.steps import answered_by
from agents.runtime.definitions import Agent, finish, register
from agents.runtime.llm import ChatResult
from agents.runtime.models import PackedContext
from agents.runtime.services import conversation_start
from memory.facts import services as memory_services
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)

FACT = "Prefers to be contacted by email, never by phone before nine in the morning please"

# --- agents ---------------------------------------------------------------------------------------

recalls = Agent("context_record_recalls", version=1, first="answer")


@recalls.step
def answer(ctx):
    """Recalls the person's facts, packs them, asks the configured (scripted) model."""
    found = ctx.memory.recall(ctx.run_input["message"])
    packed = ctx.pack(system="You help.", current=ctx.run_input["message"], memories=found)
    ctx.say(ctx.llm.chat(packed.messages).content)
    return finish({})


register(recalls)


class NamedModel:
    """A model that says who it is, as a real client does."""

    provider = "acme-llm"
    model = "acme-small"

    def chat(self, messages, *, tools=None, on_token=None):
        return ChatResult(content="fine", model="acme-small-2025-01")


class Anonymous:
    """A model class that names no provider."""

    def chat(self, messages, *, tools=None, on_token=None):
        return ChatResult(content="fine")


several = Agent("context_record_several", version=1, first="answer_several")


@several.step
def answer_several(ctx):
    ctx.pack(system="A draft nobody sends.")
    first = ctx.pack(system="You help.")
    ctx.live(NamedModel()).chat(first.messages)
    second = ctx.pack(system="You help again.")
    ctx.llm.chat(second.messages)
    third = ctx.pack(system="You help once more.")
    ctx.live(Anonymous()).chat(third.messages)
    ctx.pack(system="Packed, never sent.")
    return finish({})


register(several)


def converse(membership, agent: str, message: str):
    principal = factories.principal_for(membership)
    with tenant_scope(principal.tenant.pk):
        return conversation_start(principal=principal, agent=agent, message=message)


def records(run) -> list[PackedContext]:
    with tenant_scope(run.tenant_id):
        return list(PackedContext.objects.for_tenant(run.tenant_id).filter(run=run))


def memory_items(record) -> list[dict]:
    return [i for i in record.items if i["section"] == "memory"]


@pytest.fixture(autouse=True)
def _words_only(settings):
    # Full-text retrieval: the facts need no embedding worker to be found.
    settings.MEMORY_EMBEDDING_PROVIDER = "none"


# --- the record -----------------------------------------------------------------------------------


def test_the_record_names_the_scripted_provider_that_answered_not_the_configured_model(
    members, step, enqueued, settings
):
    assert settings.LLM_PROVIDER == "scripted" and settings.LLM_MODEL == "gpt-4o-mini"
    run = converse(members["member"], "context_record_recalls", "How should you contact me?")
    assert step(run).status == "succeeded"
    [record] = records(run)
    assert (record.provider, record.provider_model) == ("scripted", "scripted")
    assert record.model == "gpt-4o-mini"  # what the tokens were counted for, as before


def test_each_pack_names_the_call_that_followed_it_and_none_when_no_call_did(
    members, step, enqueued
):
    run = converse(members["member"], "context_record_several", "hello")
    assert step(run).status == "succeeded"
    answered = [(r.index, r.provider, r.provider_model) for r in records(run)]
    assert answered == [
        (0, "", ""),  # packed again before any call
        (1, "acme-llm", "acme-small-2025-01"),  # the model the reply names
        (2, "scripted", "scripted"),
        (3, "Anonymous", ""),  # no provider named: its class is
        (4, "", ""),  # no call followed
    ]


def test_a_pack_is_answered_by_the_first_call_before_the_next_pack():
    calls = [{"provider": "a", "model": "a1"}, {"provider": "b", "model": "b1"}]
    assert answered_by(calls, [0, 0], 0) == {"provider": "", "provider_model": ""}
    assert answered_by(calls, [0, 0], 1) == {"provider": "a", "provider_model": "a1"}
    assert answered_by(calls, [0, 2], 0) == {"provider": "a", "provider_model": "a1"}
    assert answered_by(calls, [0, 2], 1) == {"provider": "", "provider_model": ""}


def test_memory_items_record_the_facts_they_quote_by_id_key_and_category_never_their_text(
    members, step, enqueued
):
    fact = remember(members["member"], FACT, key="contact.channel")
    run = converse(members["member"], "context_record_recalls", "How should you contact me?")
    step(run)
    [record] = records(run)
    [item] = memory_items(record)
    assert item["label"] == "1 remembered fact" and item["included"]
    [quoted] = item["facts"]
    assert quoted["id"] == str(fact.pk)
    assert (quoted["key"], quoted["category"]) == ("contact.channel", "preference")
    assert 0 < quoted["tokens"] < item["tokens"]  # its line, not the section's header
    assert "contacted" not in json.dumps(record.items)


def test_records_written_before_providers_were_kept_read_as_not_recorded(client_for, members):
    record = factories.make_row(PackedContext, members["admin"].tenant)
    assert (record.provider, record.provider_model) == ("", "")
    page = client_for("admin").get(f"/runs/{record.run_id}/context/").content.decode()
    assert "not recorded" in page


# --- the run page: who sees what a fact says and a link to it -------------------------------------


@pytest.fixture
def fact(members):
    return remember(members["member"], FACT, key="contact.channel")


@pytest.fixture
def recalled(members, fact, step, enqueued):
    """The member's run, whose step quoted the member's fact to the model."""
    run = converse(members["member"], "context_record_recalls", "How should you contact me?")
    step(run)
    return run


def grant_support(members, on: bool = True) -> None:
    admin = factories.principal_for(members["admin"])
    with tenant_scope(admin.tenant.pk):
        memory_services.support_access_set(actor=admin, enabled=on)


def fact_links(html: str) -> list[str]:
    return re.findall(r'<a class="fact-text" href="([^"]+)"', html)


SHORT = FACT[:60]  # the shortened text starts like this


@pytest.mark.parametrize("page", ["/runs/{}/", "/runs/{}/context/"])
def test_the_person_sees_what_each_quoted_fact_says_and_a_link_to_it(
    client_for, recalled, fact, page
):
    client = client_for("member")
    html = client.get(page.format(recalled.pk)).content.decode()
    assert SHORT in html and "<code>contact.channel</code>" in html
    assert "Answered by" in html and '<strong class="answered-by">scripted</strong>' in html
    [link] = fact_links(html)
    assert link == f"/memory/#fact-{fact.pk}"
    target = client.get(link.split("#")[0])
    assert target.status_code == 200 and f'id="fact-{fact.pk}"' in target.content.decode()


SUPPORT_ON = {"admin": True, "manager": True, "viewer": False}


@pytest.mark.parametrize("who", ["admin", "manager", "viewer"])
def test_support_roles_see_the_fact_and_its_link_only_while_support_access_is_granted(
    client_for, members, recalled, fact, who
):
    client = client_for(who)
    off = client.get(f"/runs/{recalled.pk}/").content.decode()
    assert off.count(SHORT) == 0 and fact_links(off) == []
    assert "<code>contact.channel</code>" in off  # what it is, not what it says
    assert "while the tenant grants support access" in off
    grant_support(members)
    on = client.get(f"/runs/{recalled.pk}/").content.decode()
    assert (SHORT in on) == SUPPORT_ON[who]
    links = fact_links(on)
    if not SUPPORT_ON[who]:
        assert links == []
        return
    subject = members["member"].user_id
    assert links == [f"/memory/?subject={subject}#fact-{fact.pk}"]
    target = client.get(links[0].split("#")[0])
    assert target.status_code == 200 and f'id="fact-{fact.pk}"' in target.content.decode()


def test_other_tenants_get_404_for_the_run_and_its_context(client_for, members, recalled):
    grant_support(members)
    outsider = client_for("outsider")
    assert outsider.get(f"/runs/{recalled.pk}/").status_code == 404
    assert outsider.get(f"/runs/{recalled.pk}/context/").status_code == 404
    assert outsider.get(f"/api/v1/runs/{recalled.pk}/context").status_code == 404


def test_another_member_gets_404_for_the_persons_run(client_for, tenant_a, recalled):
    other = factories.make_member(tenant_a)
    client = client_for("member")
    client.force_login(other.user)
    assert client.get(f"/runs/{recalled.pk}/context/").status_code == 404


def test_a_corrected_fact_links_to_its_current_version(client_for, members, recalled, fact):
    principal = factories.principal_for(members["member"])
    with tenant_scope(principal.tenant.pk):
        new = memory_services.fact_edit(actor=principal, fact=fact, text="Prefers SMS")
    html = client_for("member").get(f"/runs/{recalled.pk}/").content.decode()
    assert fact_links(html) == [f"/memory/#fact-{new.pk}"]
    assert "Prefers SMS" in html and "corrected since" in html


def test_a_deleted_fact_leaves_no_text_behind(client_for, members, recalled, fact):
    principal = factories.principal_for(members["member"])
    with tenant_scope(principal.tenant.pk):
        memory_services.fact_delete(actor=principal, fact=fact)
    html = client_for("member").get(f"/runs/{recalled.pk}/").content.decode()
    assert "A fact since deleted" in html and SHORT not in html and fact_links(html) == []


def test_the_page_draws_the_tokens_by_section_as_a_stacked_bar(client_for, recalled):
    html = client_for("admin").get(f"/runs/{recalled.pk}/").content.decode()
    bars = re.search(
        r'<figure class="chart chart-stacked" id="context-bars-1-0">.*?</figure>', html
    )
    assert bars is not None
    shown = set(re.findall(r'data-series="([a-z_]+)"', bars.group(0)))
    assert shown == {"system", "memory", "current"}
    assert "style=" not in bars.group(0)  # the CSP forbids inline styles


# --- the API --------------------------------------------------------------------------------------


def test_the_api_carries_the_provider_model_and_fact_references_without_text(
    client_for, recalled, fact
):
    [record] = client_for("member").get(f"/api/v1/runs/{recalled.pk}/context").json()
    assert (record["provider"], record["provider_model"]) == ("scripted", "scripted")
    [memory] = [i for i in record["items"] if i["section"] == "memory"]
    [quoted] = memory["facts"]
    assert quoted["id"] == str(fact.pk) and quoted["key"] == "contact.channel"
    assert quoted["category"] == "preference" and quoted["tokens"] > 0
    assert all(i["facts"] == [] for i in record["items"] if i["section"] != "memory")
    assert "contacted" not in json.dumps(record)
