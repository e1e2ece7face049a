"""Remembering facts: the one write path, for one fact (`fact_remember`: the API's POST, the
MCP tool, a step's `ctx.memory`) and for many about one subject (`facts_remember`: the API's
`facts:batch`).

Every item is checked on its own (a refused one writes nothing and says why), then played in
order against the subject's live facts, locked once: the same text (or a near-duplicate,
`memory/facts/duplicates.py`) refreshes the fact it repeats, a known key supersedes (the old
version stays as history), past a category's cap the least recently updated facts go. The
plan is then written in a few statements, with one embedding task. A batch answers each item
what a single write would have answered it, had the items come one after the other
(tests/memory/test_batch_api.py compares them item by item).
"""

from __future__ import annotations

import copy
import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from core.errors import AppError, BadInput
from memory import category_rules, errors
from memory.facts import duplicates, services
from memory.models import MemoryFact, SourceKind

MAX_ITEMS = 500
# What a refresh or a supersede changes on a fact that was already stored.
_CHANGED = [
    "confidence",
    "updated_at",
    "expires_at",
    "ttl_minutes",
    "valid_until",
    "superseded_by",
]
_TICK = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class Remembered:
    """An accepted item: its fact as the single POST would have answered it at that point."""

    fact: MemoryFact
    created: bool  # a new fact or a new version; False: the same fact refreshed


@dataclass(frozen=True)
class _Item:
    category: str
    text: str
    normalized: str
    key: str
    rules: category_rules.Rules
    confidence: float
    occurred_at: dt.datetime | None
    value: dict[str, Any] | None = None
    ttl_minutes: float | None = None


def fact_remember(
    *,
    tenant_id: Any,
    subject_id: int,
    source_kind: str = SourceKind.USER,
    source_session_id: Any = None,
    source_run_id: Any = None,
    source_message_seq: int | None = None,
    by_agent: bool = False,
    **fact: Any,
) -> MemoryFact:
    """Remember one fact: `category` and `text` or a JSON object `value` (memory/facts/
    values.py), and optionally `key`, `confidence`, `occurred_at` (when what it says happened
    or was said; default now) and `ttl_minutes` (the writer's own TTL, see services.expiry).
    The same fact again refreshes it (the answer's `merged_into` names it); a new value for a
    key supersedes. Raises the refusal (an AppError) instead of writing.

    Two writers may give one person's key its first value at once: the second finds the
    unique slot taken when it inserts. It then reads again (the first writer's fact has
    committed) and supersedes it, as if it had come second, instead of failing. Only a write
    with a key can collide, so only those pay for the savepoint."""
    source = {
        "source_kind": source_kind,
        "source_session_id": source_session_id,
        "source_run_id": source_run_id,
        "source_message_seq": source_message_seq,
    }

    def remember() -> MemoryFact:
        [outcome] = _remember(tenant_id, subject_id, [fact], source, by_agent=by_agent)
        if isinstance(outcome, AppError):
            raise outcome
        return outcome.fact

    if not fact.get("key"):
        return remember()
    try:
        with transaction.atomic():
            return remember()
    except IntegrityError as exc:
        if "memfact_one_live_per_key" not in str(exc):
            raise
        return remember()


@transaction.atomic
def facts_remember(
    *,
    tenant_id: Any,
    subject_id: int,
    facts: Sequence[Mapping[str, Any]],
    source_kind: str = SourceKind.USER,
    by_agent: bool = False,
) -> list[Remembered | AppError]:
    """Remember each of `facts` (each as `fact_remember` takes one) as `fact_remember` would
    one by one; answers, in order, each one's fact or its refusal."""
    if len(facts) > MAX_ITEMS:
        raise BadInput(f"At most {MAX_ITEMS} facts in one batch.")
    return _remember(tenant_id, subject_id, facts, {"source_kind": source_kind}, by_agent=by_agent)


# Savepoint-free: validation refuses before anything is written, a batch is atomic itself,
# and a step's proposal brings its own savepoint (memory/facts/steps.py).
@transaction.atomic(savepoint=False)
def _remember(
    tenant_id: Any,
    subject_id: Any,
    facts: Sequence[Mapping[str, Any]],
    source: dict[str, Any],
    *,
    by_agent: bool,
) -> list[Remembered | AppError]:
    known = category_rules.categories(tenant_id)
    outcomes: list[Remembered | AppError | None] = [None] * len(facts)
    accepted: list[tuple[int, _Item]] = []
    for index, data in enumerate(facts):
        try:
            accepted.append((index, _clean(data, known, by_agent=by_agent)))
        except AppError as exc:
            outcomes[index] = exc
    if accepted:
        plan = _Plan(
            tenant_id=tenant_id,
            subject_id=subject_id,
            source=source,
            live=_lock_neighbours(tenant_id, subject_id, [item for _, item in accepted]),
        )
        for index, item in accepted:
            outcomes[index] = plan.apply(item)
        plan.write()
    return [outcome for outcome in outcomes if outcome is not None]


def _clean(
    data: Mapping[str, Any], known: dict[str, category_rules.Rules], *, by_agent: bool
) -> _Item:
    # The checks in the order a caller learns of them, so one mistake has one code.
    text, normalized, value = services.clean_content(data.get("text"), data.get("value"))
    key = services.clean_key(data.get("key", ""))
    ttl_minutes = services.clean_ttl(data.get("ttl_minutes"))
    category = data.get("category")
    if not isinstance(category, str) or category not in known:
        raise errors.UnknownCategory(detail={"known": sorted(known)})
    rules = known[category]
    if by_agent and not rules.agents_may_write:
        raise errors.CategoryNotWritable(detail={"category": category})
    return _Item(
        category=category,
        text=text,
        normalized=normalized,
        value=value,
        ttl_minutes=ttl_minutes,
        key=key,
        rules=rules,
        confidence=min(max(float(data.get("confidence", 1.0)), 0.0), 1.0),
        occurred_at=data.get("occurred_at"),
    )


def _lock_neighbours(tenant_id: Any, subject_id: Any, items: list[_Item]) -> list[MemoryFact]:
    """The subject's live facts any item could refresh, supersede or evict, locked, oldest
    first: those of the items' categories and those holding the items' keys."""
    keys = sorted({item.key for item in items if item.key})
    near = Q(category__in=sorted({item.category for item in items}))
    if keys:
        near |= Q(key__in=keys)
    return list(
        services._live(tenant_id, subject_id)
        .filter(near)
        .select_for_update()
        .defer("embedding")
        .order_by("created_at")
    )


class _Plan:
    """The subject's live facts as the items change them, and the writes that will do it."""

    def __init__(
        self, *, tenant_id: Any, subject_id: Any, source: dict[str, Any], live: list[MemoryFact]
    ) -> None:
        self.tenant_id, self.subject_id = tenant_id, subject_id
        self.source = source  # source_kind, and the session, run and message it came from
        self.live = live  # oldest first; new facts go last
        self.stored = {fact.pk for fact in live}
        self.stored_lineages = {fact.lineage for fact in live}
        self.touched: dict[Any, MemoryFact] = {}  # stored facts refreshed or superseded
        self.new: list[MemoryFact] = []  # rows to insert, every version, in order
        self.evicted: set[uuid.UUID] = set()  # stored lineages to delete
        self.dropped_texts: list[str] = []  # new facts evicted again by a later item
        self.answers: list[tuple[Remembered, MemoryFact]] = []
        self.clock = category_rules.now() - _TICK

    def apply(self, item: _Item) -> Remembered:
        # Every item its own instant, strictly after the one before, as if posted in turn.
        self.clock = now = max(category_rules.now(), self.clock + _TICK)
        same_keys = {item.key, ""} if item.key else {""}
        twin = next(
            (
                f
                for f in self.live
                if services.same_content(f, item.category, item.normalized, item.value)
                and f.key in same_keys
            ),
            None,
        )
        if twin is not None:
            return self._answer(self._refresh(twin, item, now), created=False)
        old = next((f for f in self.live if item.key and f.key == item.key), None)
        if old is not None:
            return self._answer(self._supersede(old, item, now), created=True)
        near = None
        if item.value is None:  # never for a JSON value: its words are data
            near = duplicates.find_twin(
                item.normalized,
                [
                    f
                    for f in self.live
                    if f.category == item.category and f.key in same_keys and f.value is None
                ],
            )
        if near is not None:
            return self._answer(self._refresh(near[0], item, now), created=False)
        self._evict_over_cap(item)
        fact = self._fact(item, now, lineage=uuid.uuid4(), key=item.key, pinned=False)
        self.live.append(fact)
        return self._answer(fact, created=True)

    def _refresh(self, fact: MemoryFact, item: _Item, now: dt.datetime) -> MemoryFact:
        fact.confidence = max(fact.confidence, item.confidence)
        fact.updated_at, fact.ttl_minutes = now, item.ttl_minutes
        fact.expires_at = services.expiry(item.rules, now, item.ttl_minutes)
        self._touch(fact)
        return fact

    def _supersede(self, old: MemoryFact, item: _Item, now: dt.datetime) -> MemoryFact:
        new = self._fact(item, now, lineage=old.lineage, key=old.key, pinned=old.pinned)
        old.valid_until, old.superseded_by_id = now, new.pk
        self._touch(old)
        self.live.remove(old)
        self.live.append(new)
        return new

    def _evict_over_cap(self, item: _Item) -> None:
        """Make room for one more fact of the category, as services._evict_over_cap does."""
        in_category = [f for f in self.live if f.category == item.category]
        surplus = len(in_category) - item.rules.max_facts_per_subject + 1
        if surplus <= 0:
            return
        for fact in sorted(in_category, key=lambda f: (f.pinned, f.updated_at))[:surplus]:
            lineage = fact.lineage
            if lineage in self.stored_lineages:
                self.evicted.add(lineage)
            self.dropped_texts += [f.text for f in self.new if f.lineage == lineage]
            self.new = [f for f in self.new if f.lineage != lineage]
            self.live = [f for f in self.live if f.lineage != lineage]
            self.touched = {pk: f for pk, f in self.touched.items() if f.lineage != lineage}

    def _fact(
        self, item: _Item, now: dt.datetime, *, lineage: uuid.UUID, key: str, pinned: bool
    ) -> MemoryFact:
        fact = MemoryFact(
            id=uuid.uuid4(),
            tenant_id=self.tenant_id,
            subject_id=self.subject_id,
            lineage=lineage,
            category=item.category,
            key=key,
            text=item.text,
            value=item.value,
            normalized=item.normalized,
            **self.source,
            confidence=item.confidence,
            pinned=pinned,
            updated_at=now,  # what the cap sorts by until the insert stamps it
            valid_from=now,
            occurred_at=item.occurred_at or now,
            ttl_minutes=item.ttl_minutes,
            expires_at=services.expiry(item.rules, now, item.ttl_minutes),
        )
        self.new.append(fact)
        return fact

    def _touch(self, fact: MemoryFact) -> None:
        if fact.pk in self.stored:
            self.touched[fact.pk] = fact

    def _answer(self, fact: MemoryFact, *, created: bool) -> Remembered:
        # A copy: later items may refresh, supersede or evict the fact, as they would have
        # after a single POST had answered.
        answer = Remembered(fact=copy.copy(fact), created=created)
        if not created:
            answer.fact.merged_into = fact.pk  # type: ignore[attr-defined]  # the fact it repeats
        self.answers.append((answer, fact))
        return answer

    def write(self) -> None:
        """Apply the plan: deletions, then changed stored facts (closing superseded keys
        before the new versions take them), then every new row; one embedding task."""
        rows = MemoryFact.objects.for_tenant(self.tenant_id)
        if self.evicted:
            services._delete_lineages(self.tenant_id, self.subject_id, list(self.evicted))
        if self.dropped_texts:
            services.redact_summaries(
                tenant_id=self.tenant_id, subject_id=self.subject_id, texts=self.dropped_texts
            )
        if self.touched:
            rows.bulk_update(list(self.touched.values()), _CHANGED)
        if self.new:
            rows.bulk_create(self.new)
        for answer, fact in self.answers:  # the insert stamped created_at on the originals
            if answer.fact.created_at is None:
                answer.fact.created_at = fact.created_at or fact.valid_from
        live = [fact.pk for fact in self.new if fact.valid_until is None]
        services.schedule_embedding(self.tenant_id, live)
