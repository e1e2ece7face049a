"""Ranking: BM25 weighs rare words over words every fact shares, the fused score explains
itself, and questions about time weigh when a fact happened."""

from __future__ import annotations

import datetime as dt

import pytest

from memory.facts.timewords import time_intent
from memory.search import retrieval
from tenants.scope import tenant_scope
from tests.memory.conftest import embed_all, remember, uses_model

pytestmark = pytest.mark.django_db

CHAT = [
    "Melanie: I took the kids camping by the lake last weekend.",
    "Melanie: Painting helps me relax after work.",
    "Melanie: We went to the museum and saw the dinosaur bones.",
    "Melanie: My sister visited us from Ohio.",
    "Melanie: The garden is full of tulips this spring.",
    "Melanie: Melanie here again, Melanie loves Melanie things.",
]


def search(member, query: str, **kwargs):
    with tenant_scope(member.tenant_id):
        return retrieval.search(
            tenant_id=member.tenant_id, subject_id=member.user_id, query=query, **kwargs
        )


def at(year: int, month: int = 1, day: int = 1) -> dt.datetime:
    return dt.datetime(year, month, day, 12, tzinfo=dt.UTC)


def midnight(year: int, month: int) -> dt.datetime:
    return dt.datetime(year, month, 1, tzinfo=dt.UTC)


def test_a_rare_word_outranks_a_name_that_every_fact_shares(members, no_embeddings):
    ada = members["member"]
    for text in CHAT:
        remember(ada, text, category="note")
    found = search(ada, "When did Melanie go to the museum?")
    assert found[0].text == CHAT[2]
    # The name is in every fact: repeating it three times buys next to nothing.
    by_text = {f.text: f for f in found}
    assert by_text[CHAT[5]].text_score < found[0].text_score / 5


def test_of_two_facts_with_the_same_match_the_shorter_ranks_first(members, no_embeddings):
    ada = members["member"]
    long = "Prefers the window seat on long flights, and also likes " + "quiet " * 30 + "cabins"
    remember(ada, long, category="note")
    remember(ada, "Prefers the window seat", category="note")
    remember(ada, "Drinks tea", category="note")
    found = search(ada, "window seat")
    assert [f.text for f in found][:2] == ["Prefers the window seat", long]


@uses_model
@pytest.mark.slow
def test_results_explain_the_parts_of_their_score(members):
    ada = members["member"]
    remember(ada, "Prefers email over phone calls", category="preference")
    remember(ada, "Lives in Lyon", category="profile")
    embed_all(ada)
    [best, *_] = search(ada, "how should we contact her? email", vector=None)
    assert set(best.parts) == {"text", "vector", "category", "recency", "confidence", "time"}
    assert best.parts["text"] == 1.0 and best.parts["vector"] is None
    assert best.parts["time"] == 1.0


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Where did she move most recently?", "Moved to Berlin"),
        ("Where did she move last?", "Moved to Berlin"),
        ("Where did she first move?", "Moved to Paris"),
        ("Where did she move in March 2023?", "Moved to Lyon"),
        ("Where did she move in 2022?", "Moved to Paris"),
        ("Where did she move before 2023?", "Moved to Paris"),
        ("Where did she move after March 2023?", "Moved to Berlin"),
        ("Where has she moved to since 2024?", "Moved to Berlin"),
    ],
)
def test_a_question_about_time_weighs_when_each_fact_happened(
    members, no_embeddings, question, expected
):
    ada = members["member"]
    # Learned in the opposite order from when they happened: recency of writing cannot help.
    remember(ada, "Moved to Berlin", category="note", occurred_at=at(2024, 6))
    remember(ada, "Moved to Lyon", category="note", occurred_at=at(2023, 3, 10))
    remember(ada, "Moved to Paris", category="note", occurred_at=at(2022, 2))
    found = search(ada, question)
    assert found[0].text == expected, [(f.text, f.score, f.parts) for f in found]


def test_a_question_without_time_words_ranks_by_what_it_says_not_when():
    assert time_intent("What does Melanie paint?").mode == ""
    assert time_intent("What did she do last year?").mode == ""  # a date, not an order
    assert time_intent("What was the latest book she read?").mode == "latest"
    assert time_intent("Which did she buy first?").mode == "earliest"
    may = time_intent("What happened in May 2023?")
    assert (may.mode, may.since, may.until) == ("between", midnight(2023, 5), midnight(2023, 6))
    assert time_intent("She may visit in 2021").since == dt.datetime(2021, 1, 1, tzinfo=dt.UTC)
    december = time_intent("the party in December 2022")
    assert (december.since, december.until) == (midnight(2022, 12), midnight(2023, 1))


def test_before_after_and_since_a_date_open_the_span_on_one_side():
    before = time_intent("What did she do before May 2023?")
    assert (before.mode, before.until) == ("between", midnight(2023, 5))
    assert before.since < midnight(1901, 1)
    after = time_intent("What did she do after May 2023?")
    assert (after.since, after.until.year) == (midnight(2023, 6), 2201)
    since = time_intent("What has she done since May 2023?")
    assert since.since == midnight(2023, 5)
    until = time_intent("Where did she work until 2022?")
    assert until.until == midnight(2022, 1)
    # Before an event rather than a date: no span, nothing weighs.
    assert time_intent("What did she do before the trip?").mode == ""


def test_a_repeated_question_is_embedded_once(monkeypatch):
    from memory.search import embeddings, query_vectors

    calls = []

    class Counting:
        name = "counting"

        def embed(self, texts):
            calls.append(list(texts))
            return [[0.1, 0.2, 0.3] for _ in texts]

    monkeypatch.setattr(embeddings, "get_provider", lambda: Counting())
    first = query_vectors.vector_for("  Where did she move last? ")
    again = query_vectors.vector_for("Where did she move last?")
    assert first == again == ([0.1, 0.2, 0.3], "counting")
    assert calls == [["Where did she move last?"]]
    assert query_vectors.vector_for("   ") == (None, "")


def test_a_question_whose_embedding_failed_is_embedded_again_next_time(monkeypatch):
    from memory.search import embeddings, query_vectors

    calls = []

    class Flaky:
        name = "flaky"

        def embed(self, texts):
            calls.append(list(texts))
            if len(calls) == 1:
                raise ConnectionError("the embedding service is down")
            return [[0.5] for _ in texts]

    monkeypatch.setattr(embeddings, "get_provider", lambda: Flaky())
    with pytest.raises(ConnectionError):
        query_vectors.vector_for("Is it back?")
    assert query_vectors.vector_for("Is it back?") == ([0.5], "flaky")
    assert len(calls) == 2
