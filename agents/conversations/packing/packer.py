"""The context packer: choose what one model call is given, within its token budget.

Must-include items (system prompt, current turn) go first; if they do not fit, that is an
error naming them, never a truncated prompt. The other items are taken greedily by
priority × recency × relevance per token. The summary stands in for history that is left
out. The result is in conversation order, and every item keeps the reason it was taken or
left, so a run page can show exactly what the model saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.conversations.errors import ContextBudgetExceeded

# Sections, in the order they are sent when their positions tie.
SYSTEM = "system"
SUMMARY = "summary"
MEMORY = "memory"
HISTORY = "history"  # older turns the summary does not cover yet
TOOL_RESULT = "tool_result"
RECENT = "recent"  # the last N turns
CURRENT = "current"
TOOLS = "tools"
SECTIONS = [SYSTEM, TOOLS, SUMMARY, MEMORY, HISTORY, TOOL_RESULT, RECENT, CURRENT]
LABELS = {
    SYSTEM: "System prompt",
    TOOLS: "Tool schemas",
    SUMMARY: "Summary",
    MEMORY: "Memories",
    HISTORY: "Older turns",
    TOOL_RESULT: "Earlier tool results",
    RECENT: "Recent turns",
    CURRENT: "Current turn",
}

# Reasons an item was taken or left out (stable strings: the run page and API show them).
MUST = "must include"
FITS = "fits the budget"
OVER_BUDGET = "over budget"
SUMMARISED = "covered by the summary"
STANDS_IN = "stands in for history that was left out"
REDUNDANT = "everything it summarises is sent verbatim"
TOOL_CUT = "tool not used yet and less relevant than the ones kept"


@dataclass(slots=True)
class Item:
    """One candidate: a chat message or a tool schema, with what the packer ranks it by."""

    section: str
    label: str
    tokens: int
    message: dict[str, Any] | None = None
    tool: dict[str, Any] | None = None
    order: float = 0.0  # position in the conversation
    priority: float = 1.0
    recency: float = 1.0
    relevance: float = 1.0
    must: bool = False
    # Decided before packing (covered by the summary, a tool cut): never sent.
    dropped: str = ""
    included: bool = False
    reason: str = ""
    # The remembered facts a memory item quotes: {"id", "key", "category", "tokens"}.
    facts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.priority * self.recency * self.relevance / max(self.tokens, 1)


@dataclass
class Packed:
    """What the model is sent (`messages`, `tools`) and every decision that led there."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    window: int
    reserve_output: int
    tokens_used: int
    items: list[Item]
    encoding: str = ""
    exact_tokenizer: bool = True
    model: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def budget(self) -> int:
        return self.window - self.reserve_output

    def sections(self) -> dict[str, dict[str, int]]:
        """Per section: items and tokens included and dropped."""
        totals: dict[str, dict[str, int]] = {}
        for item in self.items:
            row = totals.setdefault(
                item.section,
                {"included": 0, "dropped": 0, "tokens_included": 0, "tokens_dropped": 0},
            )
            if item.included:
                row["included"] += 1
                row["tokens_included"] += item.tokens
            else:
                row["dropped"] += 1
                row["tokens_dropped"] += item.tokens
        return {s: totals[s] for s in SECTIONS if s in totals}


def pack(items: list[Item], *, window: int, reserve_output: int = 0) -> Packed:
    """Choose from `items` what fits `window - reserve_output` tokens (see the module doc)."""
    budget = window - reserve_output
    must = [i for i in items if i.must]
    used = sum(i.tokens for i in must)
    if used > budget:
        raise _too_small(must, window=window, reserve_output=reserve_output)
    for item in must:
        item.included, item.reason = True, MUST
    summaries = [i for i in items if i.section == SUMMARY and not i.must and not i.dropped]
    optional = [i for i in items if not i.must and not i.dropped and i.section != SUMMARY]
    for item in items:
        if item.dropped:
            item.included, item.reason = False, item.dropped
    # The summary stands in for history left out: anything it covers, or anything that
    # will not fit. It goes first among the optional items when it is needed at all.
    covered = any(i.dropped == SUMMARISED for i in items)
    overflow = used + sum(i.tokens for i in optional) > budget
    for summary in summaries:
        if (covered or overflow) and used + summary.tokens <= budget:
            summary.included, summary.reason = True, STANDS_IN
            used += summary.tokens
        else:
            summary.reason = REDUNDANT if not (covered or overflow) else OVER_BUDGET
    if overflow:
        # Best value per token first; among equals the newer item.
        optional.sort(key=lambda i: (i.score, i.order), reverse=True)
    for item in optional:
        if used + item.tokens <= budget:
            item.included, item.reason = True, FITS
            used += item.tokens
        else:
            item.reason = OVER_BUDGET
    return _assemble(items, window=window, reserve_output=reserve_output, used=used)


def _assemble(items: list[Item], *, window: int, reserve_output: int, used: int) -> Packed:
    chosen = sorted(
        (i for i in items if i.included and i.message is not None),
        key=lambda i: (i.order, SECTIONS.index(i.section)),
    )
    tools = [i.tool for i in items if i.included and i.tool is not None]
    return Packed(
        messages=[i.message for i in chosen if i.message is not None],
        tools=tools,
        window=window,
        reserve_output=reserve_output,
        tokens_used=used,
        items=items,
    )


def _too_small(must: list[Item], *, window: int, reserve_output: int) -> ContextBudgetExceeded:
    budget = window - reserve_output
    need = sum(i.tokens for i in must)
    running, missing = 0, []
    for item in sorted(must, key=lambda i: SECTIONS.index(i.section)):
        running += item.tokens
        if running > budget:
            missing.append(item)
    names = ", ".join(f"{i.label} ({i.tokens} tokens)" for i in missing)
    return ContextBudgetExceeded(
        f"The must-include items need {need} tokens but the budget is {budget} "
        f"({window} in the window, {reserve_output} reserved for the output). "
        f"Did not fit: {names}.",
        detail={
            "budget": budget,
            "window": window,
            "reserve_output": reserve_output,
            "must_include_tokens": need,
            "did_not_fit": [
                {"section": i.section, "label": i.label, "tokens": i.tokens} for i in missing
            ],
        },
    )
