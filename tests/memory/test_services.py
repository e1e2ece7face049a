"""Writing facts: validation, secret refusal, supersede with history, dedupe, caps, policies."""

from __future__ import annotations

import pytest

from memory import errors
from memory.facts import services
from memory.facts.secrets import secret_kind
from memory.models import MemoryFact
from tenants.scope import tenant_scope
from tests import factories
from tests.memory.conftest import facts_of, remember

pytestmark = pytest.mark.django_db


def test_a_new_value_for_the_same_key_supersedes_the_old_one_which_stays_as_history(members):
    ada = members["member"]
    old = remember(ada, "Prefers to be contacted by phone", key="contact.channel")
    new = remember(ada, "Prefers to be contacted by email", key="contact.channel")
    rows = {f.pk: f for f in facts_of(ada)}
    assert rows[old.pk].valid_until is not None
    assert rows[old.pk].superseded_by_id == new.pk
    assert rows[new.pk].valid_until is None and rows[new.pk].lineage == old.lineage
    assert [f.pk for f in facts_of(ada, live_only=True)] == [new.pk]


def test_the_same_fact_again_does_not_duplicate(members):
    ada = members["member"]
    first = remember(ada, "Likes   short answers.", confidence=0.5)
    again = remember(ada, "likes short answers", confidence=0.9)
    assert again.pk == first.pk and again.confidence == 0.9
    assert len(facts_of(ada)) == 1


@pytest.mark.parametrize(
    "text,kind",
    [
        ("My card is 4111 1111 1111 1111", "card_number"),
        ("use key sk-live-abcdefghijklmnop1234", "api_key"),
        ("my password is hunter22", "password"),
        ("SSN 123-45-6789", "national_id"),
        ("AWS AKIAIOSFODNN7EXAMPLE", "api_key"),
    ],
)
def test_secrets_and_credentials_are_refused_and_nothing_is_stored(members, text, kind):
    ada = members["member"]
    with pytest.raises(errors.SecretRefused) as refused:
        remember(ada, text)
    assert refused.value.detail == {"kind": kind}
    assert facts_of(ada) == []


def test_ordinary_facts_with_numbers_are_not_mistaken_for_secrets():
    assert secret_kind("Order A-1001 arrived on 2025-03-03, 2 items, call after 5pm") is None
    assert secret_kind("Prefers to be contacted by email") is None


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"text": "  "}, errors.EmptyText),
        ({"text": "x" * 1001}, errors.TextTooLong),
        ({"text": "ok", "category": "nonsense"}, errors.UnknownCategory),
        ({"text": "ok", "key": "no spaces allowed"}, errors.InvalidKey),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(members, kwargs, error):
    ada = members["member"]
    with pytest.raises(error):
        remember(ada, **{"category": "preference", **kwargs})
    assert facts_of(ada) == []


def test_editing_keeps_history_and_editing_a_superseded_fact_is_a_conflict(members):
    ada = members["member"]
    fact = remember(ada, "Lives in Lyon")
    actor = factories.principal_for(ada)
    with tenant_scope(ada.tenant_id):
        new = services.fact_edit(actor=actor, fact=fact, text="Lives in Paris")
        fact.refresh_from_db()
        assert fact.superseded_by_id == new.pk and new.source_kind == "user"
        with pytest.raises(errors.FactSuperseded):
            services.fact_edit(actor=actor, fact=fact, text="Lives in Nice")
    assert [f.text for f in facts_of(ada)] == ["Lives in Lyon", "Lives in Paris"]


def test_a_category_agents_may_not_write_refuses_agent_writes_but_not_the_user(members):
    admin = factories.principal_for(members["admin"])
    ada = members["member"]
    with tenant_scope(admin.tenant.pk):
        services.policy_set(actor=admin, category="profile", agents_may_write=False)
    with pytest.raises(errors.CategoryNotWritable):
        remember(ada, "Is 42 years old", category="profile", by_agent=True)
    assert remember(ada, "Is 42 years old", category="profile").pk


def test_a_tenant_can_add_a_category_with_its_own_ttl_and_cap(members):
    admin = factories.principal_for(members["admin"])
    ada = members["member"]
    with tenant_scope(admin.tenant.pk):
        services.policy_set(actor=admin, category="diet", ttl_days=10, max_facts_per_subject=2)
    a = remember(ada, "Vegetarian", category="diet")
    remember(ada, "No nuts", category="diet")
    remember(ada, "No gluten", category="diet")
    texts = [f.text for f in facts_of(ada)]
    assert "Vegetarian" not in texts and len(texts) == 2
    assert (a.expires_at - a.valid_from).days == 10


def test_deleting_a_fact_removes_every_version_and_redacts_summaries_quoting_it(members):
    from agents.runtime.models import AgentSession

    ada = members["member"]
    fact = remember(ada, "Prefers phone", key="contact.channel")
    fact = remember(ada, "Prefers to be contacted by email", key="contact.channel")
    with tenant_scope(ada.tenant_id):
        session = AgentSession.objects.create(
            tenant_id=ada.tenant_id,
            user=ada.user,
            agent="refund_desk",
            summary="Customer asked for a refund. Prefers to be contacted by email.",
        )
        deleted = services.fact_delete(actor=factories.principal_for(ada), fact=fact)
        session.refresh_from_db()
        left = MemoryFact.objects.for_tenant(ada.tenant_id).filter(lineage=fact.lineage).count()
    assert deleted == 2 and left == 0
    assert "email" not in session.summary and services.REDACTED in session.summary


def test_delete_all_forgets_only_this_person_in_this_tenant(members, tenant_b):
    ada, bob = members["member"], members["viewer"]
    stranger = factories.make_member(tenant_b)
    for m in (ada, bob, stranger):
        remember(m, "Likes tea")
    with tenant_scope(ada.tenant_id):
        services.facts_delete_all(
            actor=factories.principal_for(ada), tenant_id=ada.tenant_id, subject_id=ada.user_id
        )
    assert facts_of(ada) == [] and len(facts_of(bob)) == 1 and len(facts_of(stranger)) == 1
