"""Retrieved memories as candidates, through the "memory.facts_for_context" provider when the
memory app registers one (and nothing, not an error, while none is registered)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agents.runtime import extensions
from tenants.scope import tenant_scope


@dataclass(frozen=True)
class FactRef:
    """A fact a memory item quotes, by reference: the record keeps its id, key and category,
    never its text, so a fact the person deletes does not linger in old records."""

    id: str = ""
    key: str = ""
    category: str = ""
    line: str = ""  # how it was quoted, to count its tokens; not recorded


@dataclass(frozen=True)
class Memory:
    """A retrieved fact, sent as quoted data (never as an instruction)."""

    text: str
    category: str = ""
    score: float = 1.0
    key: str = ""
    # Already quoted by the memory app (a whole section of facts): sent exactly as it is.
    rendered: str = ""
    facts: tuple[FactRef, ...] = ()  # the facts it quotes (a section quotes several)


def retrieve(*, tenant_id: Any, subject_id: Any, query: str, budget_tokens: int) -> list[Memory]:
    """Facts about `subject_id` relevant to `query`, best first; [] without a memory app."""
    if subject_id is None or not query:
        return []
    facts_for_context = extensions.provider("memory.facts_for_context")
    if facts_for_context is None:
        return []
    with tenant_scope(tenant_id):
        found = facts_for_context(
            tenant_id=tenant_id, subject_id=subject_id, query=query, budget_tokens=budget_tokens
        )
    return as_memories(found)


def as_memories(found: Any) -> list[Memory]:
    """Memories from what retrieval returned: a list of facts or an object with `.facts`."""
    facts = list(getattr(found, "facts", found) or [])
    section = getattr(found, "text", "")
    if facts and isinstance(section, str) and section:
        # The memory app quoted and budgeted the facts as one section: keep it whole.
        lines = list(getattr(found, "lines", None) or [])
        refs = tuple(_ref(f, lines[i] if i < len(lines) else "") for i, f in enumerate(facts))
        label = f"{len(facts)} remembered fact{'' if len(facts) == 1 else 's'}"
        return [Memory(text=section, rendered=section, key=label, facts=refs)]
    memories = [_memory(fact) for fact in facts]
    # Scores are on the retriever's scale; relevance is relative to the best fact.
    best = max((m.score for m in memories), default=0.0)
    if best > 0:
        memories = [replace(m, score=max(m.score / best, 0.01)) for m in memories]
    return memories


def _get(fact: Any, name: str, default: Any = "") -> Any:
    if isinstance(fact, dict):
        return fact.get(name, default)
    return getattr(fact, name, default)


def _ref(fact: Any, line: str = "") -> FactRef:
    return FactRef(
        id=str(_get(fact, "id", "") or _get(fact, "pk", "") or ""),
        key=str(_get(fact, "key", "") or ""),
        category=str(_get(fact, "category", "") or ""),
        line=line,
    )


def _memory(fact: Any) -> Memory:
    key = _get(fact, "key", "") or _get(fact, "id", "") or _get(fact, "pk", "")
    ref = _ref(fact)
    return Memory(
        text=str(_get(fact, "text")),
        category=str(_get(fact, "category") or ""),
        score=float(_get(fact, "score", 1.0) or 0.0),
        key=f"fact {key}" if key else "",
        facts=(ref,) if ref.id or ref.key else (),
    )
