"""Near-duplicate facts, decided at write time by their words (no embedding model).

Two facts of one person and category are near-duplicates when their content words (the
normalized text's words without stop words) overlap by at least
`MEMORY_DEDUPE_WORD_SIMILARITY` (Jaccard), and they do not differ in a number or a negation:
"Allergic to peanuts and tree nuts" and "is allergic to tree nuts and peanuts" are one fact,
"note number 1 about tulips" and "note number 2 about tulips", or "likes tea" and "does not
like tea", never are. The threshold was measured on the LoCoMo dev split (docs/memory.md).
Candidates are the person's live facts of one category, already read by the write: a few
dozen to a few hundred short texts, compared in microseconds each. A candidate's words are
kept on the fact object the write (or batch) holds, never in a process-wide cache: a deleted
fact's words must not linger.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol, TypeVar

from django.conf import settings

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)*")
_CLITIC = re.compile(r"'(?:s|re|m|ve|d|ll)$")
# Words that say nothing about what a fact is about: articles, pronouns, connectives and the
# prepositions that do not turn a fact around. Not among them: tense and modal verbs ("is" /
# "was" / "will"), quantifiers, directions ("to" / "from", "before" / "after"), negations.
# fmt: off
STOP_WORDS = frozenset([
    "a", "an", "the", "and", "or", "of", "in", "on", "at", "by", "with", "as", "into", "this",
    "that", "these", "those", "i", "me", "my", "myself", "you", "your", "yours", "it", "its",
    "we", "us", "our", "ours", "they", "them", "their", "theirs", "he", "him", "his", "she",
    "her", "hers", "be", "being", "been", "also", "really", "very", "just",
])
NEGATIONS = frozenset([
    "not", "no", "never", "nor", "neither", "none", "nobody", "nothing", "nowhere", "without",
    "cannot",
])
# fmt: on


class _Fact(Protocol):
    normalized: str


F = TypeVar("F", bound=_Fact)


def words(normalized: str) -> frozenset[str]:
    """The content words of a normalized (lowercase) fact text."""
    text = normalized.replace("\u2019", "'")
    found = set(_WORD.findall(text))
    if "'" in text:  # "support's" is "support"; "can't" stays a negation
        clitics = {w for w in found if "'" in w}
        found -= clitics
        found |= {w if w.endswith("n't") else _CLITIC.sub("", w) for w in clitics}
    found -= STOP_WORDS
    return frozenset(found)


def _decisive(word: str) -> bool:
    """A word two facts may not differ in and still be one fact: a number or a negation."""
    return word in NEGATIONS or word.endswith("n't") or any(c.isdigit() for c in word)


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two facts' content words; 0 if they differ in a number or a
    negation, or if either has no content word."""
    if not a or not b:
        return 0.0
    score = len(a & b) / len(a | b)
    if score and any(_decisive(w) for w in a ^ b):
        return 0.0
    return score


def find_twin(normalized: str, candidates: Iterable[F]) -> tuple[F, float] | None:
    """The candidate (a fact with `.normalized`) most similar to this normalized text, if at
    or above MEMORY_DEDUPE_WORD_SIMILARITY, with its score; the oldest of equals."""
    mine = words(normalized)
    if not mine:
        return None
    limit = settings.MEMORY_DEDUPE_WORD_SIMILARITY
    best: tuple[F, float] | None = None
    for candidate in candidates:
        theirs = _words_of(candidate)
        # Jaccard >= limit needs sizes within that ratio: most candidates end here.
        if min(len(mine), len(theirs)) < limit * max(len(mine), len(theirs)):
            continue
        score = similarity(mine, theirs)
        if score >= limit and (best is None or score > best[1]):
            best = (candidate, score)
    return best


def _words_of(fact: _Fact) -> frozenset[str]:
    """The fact's content words, computed once per fact object (a batch compares each live
    fact with every item)."""
    memo = getattr(fact, "_content_words", None)
    if memo is None or memo[0] != fact.normalized:
        memo = (fact.normalized, words(fact.normalized))
        fact._content_words = memo  # type: ignore[attr-defined]
    return memo[1]
