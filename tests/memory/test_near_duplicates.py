"""Near-duplicates are decided when a fact is written, by its words, and said out loud: the
write answers which fact it was merged into. Distinct facts that share most of their words
are kept apart; embedding a fact never merges anything."""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.test import Client

from memory.facts import duplicates
from memory.facts.services import normalize
from tests import factories
from tests.memory.conftest import embed_all, facts_of, remember, uses_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(tenant_a):
    key = factories.make_api_key(tenant_a, ["read", "write"])
    return Client(HTTP_AUTHORIZATION=f"Bearer {key.raw}")


def post_fact(api, membership, text: str, category: str = "preference"):
    return api.post(
        f"/api/v1/memory/subjects/{membership.user_id}/facts",
        json.dumps({"category": category, "text": text}),
        content_type="application/json",
    )


def test_a_near_duplicate_write_answers_200_with_the_fact_it_was_merged_into(api, members):
    ada = members["member"]
    first = post_fact(api, ada, "Allergic to peanuts and tree nuts")
    again = post_fact(api, ada, "Is allergic to tree nuts and peanuts")
    assert first.status_code == 201 and "merged_into" not in first.json()
    assert again.status_code == 200
    assert again.json()["merged_into"] == again.json()["id"] == first.json()["id"]
    assert again.json()["text"] == "Allergic to peanuts and tree nuts"
    assert [f.text for f in facts_of(ada)] == ["Allergic to peanuts and tree nuts"]


def test_the_same_text_again_answers_200_with_the_fact_it_refreshed(api, members):
    ada = members["member"]
    first = post_fact(api, ada, "Likes short answers.")
    again = post_fact(api, ada, "likes   short answers")
    assert again.status_code == 200 and again.json()["merged_into"] == first.json()["id"]


def test_the_service_marks_the_fact_a_write_was_merged_into(members):
    ada = members["member"]
    first = remember(ada, "Works night shifts as a nurse")
    merged = remember(ada, "Works as a nurse on night shifts")
    assert merged.pk == first.pk and merged.merged_into == first.pk
    assert getattr(remember(ada, "Works in Lyon"), "merged_into", None) is None


@pytest.mark.parametrize(
    "older,newer",
    [
        (
            "Bob note number 1 about gardening tulips 1",
            "Bob note number 2 about gardening tulips 2",
        ),
        ("Likes green tea", "Doesn't like green tea"),
        ("Likes green tea", "Does not like green tea"),
        ("Calls before 10am", "Calls after 10am"),
        ("Is a nurse", "Was a nurse"),
        ("Moving to Berlin in the summer", "Moving from Berlin in the summer"),
        ("Lives in Lyon with two cats", "Lives in Paris with two cats"),
        ("Has two children aged 4 and 7", "Has two children aged 5 and 8"),
        ("Prefers short answers", "Prefers short answers always"),
    ],
)
def test_distinct_facts_that_share_many_words_are_not_merged(api, members, older, newer):
    ada = members["member"]
    assert post_fact(api, ada, older).status_code == 201
    answer = post_fact(api, ada, newer)
    assert answer.status_code == 201 and "merged_into" not in answer.json()
    assert sorted(f.text for f in facts_of(ada)) == sorted([older, newer])


def test_facts_of_other_categories_or_people_are_never_merged(api, members):
    ada, bob = members["member"], members["viewer"]
    post_fact(api, ada, "Allergic to peanuts and tree nuts", category="profile")
    assert post_fact(api, ada, "Is allergic to tree nuts and peanuts").status_code == 201
    assert post_fact(api, bob, "Is allergic to tree nuts and peanuts").status_code == 201


@uses_model
@pytest.mark.slow
def test_embedding_never_merges_facts_that_mean_nearly_the_same(members):
    ada = members["member"]
    first = remember(ada, "Bob note number 1 about gardening tulips 1", category="note")
    second = remember(ada, "Bob note number 2 about gardening tulips 2", category="note")
    embed_all(ada)  # the real model
    rows = facts_of(ada)
    assert {f.pk for f in rows} == {first.pk, second.pk}
    assert float(np.dot(rows[0].embedding, rows[1].embedding)) > 0.95


def test_the_threshold_setting_decides_and_above_one_turns_near_duplicates_off(settings):
    pair = ("Allergic to peanuts and tree nuts", "is allergic to tree nuts and peanuts")
    score = duplicates.similarity(*(duplicates.words(normalize(t)) for t in pair))
    assert score == pytest.approx(5 / 6)

    class Fact:
        normalized = normalize(pair[0])

    assert duplicates.find_twin(normalize(pair[1]), [Fact()]) is not None
    settings.MEMORY_DEDUPE_WORD_SIMILARITY = 1.01
    assert duplicates.find_twin(normalize(pair[1]), [Fact()]) is None
