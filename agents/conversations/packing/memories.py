"""Retrieved memories as candidates, through the "memory.facts_for_context" provider when the
memory app registers one (and nothing, not an error, while none is registered)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agents.runtime import extensions
from tenants.scope import tenant_scope


@dataclass(frozen=True)
class Memory:
    """A retrieved fact, sent as quoted data (never as an instruction)."""

    text: str
    category: str = ""
    score: float = 1.0
    key: str = ""
    # Already quoted by the memory app (a whole section of facts): sent exactly as it is.
    rendered: str = ""


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
        return [Memory(text=section, rendered=section, key=f"{len(facts)} remembered facts")]
    memories = [_memory(fact) for fact in facts]
    # Scores are on the retriever's scale; relevance is relative to the best fact.
    best = max((m.score for m in memories), default=0.0)
    if best > 0:
        memories = [replace(m, score=max(m.score / best, 0.01)) for m in memories]
    return memories


def _memory(fact: Any) -> Memory:
    def get(name: str, default: Any = "") -> Any:
        if isinstance(fact, dict):
            return fact.get(name, default)
        return getattr(fact, name, default)

    key = get("key", "") or get("id", "") or get("pk", "")
    return Memory(
        text=str(get("text")),
        category=str(get("category") or ""),
        score=float(get("score", 1.0) or 0.0),
        key=f"fact {key}" if key else "",
    )
