"""What the privacy page shows: the facts a search and a category leave, the overview by
category, and for each fact a link to where it was learned (when the viewer may open it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.text import Truncator

from agents.runtime import selectors as runtime_selectors
from core.confirm import Confirmation, Trigger
from memory import category_rules, selectors
from memory.models import MemoryFact
from memory.search import embeddings
from tenants.models import Role, Scope
from tenants.principal import Principal


@dataclass(frozen=True)
class Filters:
    """The page's search and category, as asked (already validated)."""

    q: str = ""
    category: str = ""

    @property
    def active(self) -> bool:
        return bool(self.q or self.category)

    def as_query(self) -> dict[str, str]:
        return {"q": self.q, "category": self.category}

    def page_url(self, subject_id: Any = None) -> str:
        """The privacy page with these filters (and, for support access, the subject)."""
        query = {"subject": subject_id, **self.as_query()}
        return Trigger.make(reverse("memory:my_memory"), "", query=query).href


def privacy_context(
    principal: Principal, subject: Any, filters: Filters, *, links: bool
) -> dict[str, Any]:
    """The privacy page of `subject` as `principal` sees it. `links`: whether the viewer may
    follow links to conversations and runs (not a privacy link's session)."""
    own = subject.pk == principal.user.pk  # type: ignore[union-attr]
    tenant_id = principal.tenant.pk
    facts = selectors.live_facts(tenant_id=tenant_id, subject_id=subject.pk)
    matched = facts
    if filters.q:
        ranked = selectors.matching_fact_ids(
            tenant_id=tenant_id, subject_id=subject.pk, query=filters.q, facts=facts
        )
        by_id = {f.pk: f for f in facts}
        matched = [by_id[pk] for pk in ranked if pk in by_id]
    shown = [f for f in matched if not filters.category or f.category == filters.category]
    known = category_rules.categories(tenant_id)  # read once for the groups and the overview
    groups = selectors.group_by_category(
        tenant_id=tenant_id, subject_id=subject.pk, facts=shown, known=known
    )
    if links:
        add_source_links(principal, shown)
    if own:
        with_triggers(shown, filters)
    page_subject = None if own else subject.pk
    by_category = overview(known, facts, matched, filters, page_subject)
    return {
        "subject": subject,
        "own": own,
        "filters": filters,
        "groups": groups,
        "shown": len(shown),
        "matched": len(matched),
        "count": len(facts),
        "overview": by_category,
        "category_label": next((c["label"] for c in by_category if c["current"]), ""),
        "all_url": Filters(q=filters.q).page_url(page_subject),
        "clear_url": Filters().page_url(page_subject),
        "embeddings_on": embeddings.get_provider() is not None,
        "may_support": principal.role in (Role.ADMIN, Role.MANAGER)
        and category_rules.support_access(tenant_id),
        "is_admin": principal.can(Scope.ADMIN),
    }


def overview(
    known: dict[str, category_rules.Rules],
    facts: list[MemoryFact],
    matched: list[MemoryFact],
    filters: Filters,
    subject_id: Any = None,
) -> list[dict[str, Any]]:
    """One entry per category that holds facts (the tenant's order): how many, how many the
    search matches, the page showing only it, and whether the list shows only it now.
    `known`: the tenant's categories (category_rules.categories)."""
    order = list(known)
    totals: dict[str, int] = {}
    for fact in facts:
        totals[fact.category] = totals.get(fact.category, 0) + 1
    hits: dict[str, int] = {}
    for fact in matched:
        hits[fact.category] = hits.get(fact.category, 0) + 1
    if filters.category and filters.category not in totals:
        totals[filters.category] = 0  # asked for: shown, with nothing in it
    return [
        {
            "category": category,
            "label": known[category].label if category in known else category,
            "total": totals[category],
            "count": hits.get(category, 0),
            "current": category == filters.category,
            "url": Filters(q=filters.q, category=category).page_url(subject_id),
        }
        for category in sorted(
            totals, key=lambda c: (order.index(c) if c in order else len(order), c)
        )
    ]


def add_source_links(principal: Principal, facts: list[MemoryFact]) -> None:
    """Sets `source_url` (the message in its conversation) and `run_url` on the facts learned
    in a conversation or run that this principal may open; None where they may not."""
    session_ids = {f.source_session_id for f in facts if f.source_session_id}
    run_ids = {f.source_run_id for f in facts if f.source_run_id}
    sessions = (
        {
            s.pk: s
            for s in runtime_selectors.sessions_for(principal)
            .filter(pk__in=session_ids)
            .only("id", "title", "agent", "inherited_messages")
        }
        if session_ids
        else {}
    )
    runs = (
        set(
            runtime_selectors.runs_for(principal)
            .filter(pk__in=run_ids)
            .values_list("pk", flat=True)
        )
        if run_ids
        else set()
    )
    for fact in facts:
        session = sessions.get(fact.source_session_id)
        fact.source_session = session  # type: ignore[attr-defined]
        fact.source_url = None  # type: ignore[attr-defined]
        if session is not None:
            url = reverse("agents:conversation_detail", args=[session.pk])
            if fact.source_message_seq:
                # A fork's own message `seq` sits after what it inherits (agents.conversations).
                url += f"#pos-{session.inherited_messages + fact.source_message_seq}"
            fact.source_url = url  # type: ignore[attr-defined]
        fact.run_url = (  # type: ignore[attr-defined]
            reverse("agents:run_detail", args=[fact.source_run_id])
            + (f"#msg-{fact.source_message_seq}" if fact.source_message_seq else "")
            if fact.source_run_id in runs
            else None
        )


def delete_trigger(fact: MemoryFact, filters: Filters) -> Trigger:
    """A fact's Delete, which asks first (core.confirm); it keeps the page's filters."""
    text = Truncator(fact.text).chars(60)
    return Trigger.make(
        reverse("memory:memory_fact_delete", args=[fact.pk]),
        "Delete",
        hint=f"the fact “{text}”",
        query=filters.as_query(),
    )


def delete_confirmation(fact: MemoryFact, filters: Filters) -> Confirmation:
    trigger = delete_trigger(fact, filters)
    return Confirmation(
        trigger=trigger,
        question="Delete this fact?",
        detail="It is forgotten with its history; agents no longer know it.",
        confirm_label="Delete",
        keep_label="Keep",
        action_url=trigger.url,
        target="#memory-list",
        back_url=f"{filters.page_url()}#fact-{fact.pk}",
    )


def with_triggers(facts: list[MemoryFact], filters: Filters) -> None:
    """Each fact's delete trigger, for the template."""
    for fact in facts:
        fact.delete_trigger = delete_trigger(fact, filters)  # type: ignore[attr-defined]
